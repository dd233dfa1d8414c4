import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capabilities } from '../../src/capabilities/capabilities.js';
import { findPgBouncer, type StartedPgBouncer, startPgBouncer } from '../../src/testing/pgbouncer.js';
import { useTestDatabase } from '../helpers.js';

// capabilities() through a real PgBouncer. Without pgbouncer, vitest.config.ts leaves this file out with
// one line saying so (and fails the run when PG_TXKIT_REQUIRE_PGBOUNCER=1, as .ci/run sets).
const { url } = await useTestDatabase({ max: 2 });
const binary = await findPgBouncer();

describe.runIf(binary)('capabilities() through PgBouncer', () => {
  let transaction: StartedPgBouncer;
  let session: StartedPgBouncer;
  beforeAll(async () => {
    transaction = await startPgBouncer({ target: url, poolMode: 'transaction', poolSize: 3 });
    session = await startPgBouncer({ target: url, poolMode: 'session', poolSize: 3 });
  });
  afterAll(async () => {
    await transaction?.stop();
    await session?.stop();
  });

  it('transaction mode: the pooler is detected, and session locks and LISTEN are reported unavailable', async () => {
    const pool = new pg.Pool({ connectionString: transaction.url, max: 2 });
    try {
      const caps = (await capabilities(pool))._unsafeUnwrap();
      expect(caps.transactionPooler).toMatch(/backend/);
      expect(caps.sessionLocks).toBe(false);
      expect(caps.unsupported.sessionLocks).toMatch(/transaction-mode pooler/);
      expect(caps.listenNotify).toBe(false);
      expect(caps.unsupported.listenNotify).toMatch(/transaction-mode pooler/);
      // What works per transaction still works through it.
      expect(caps).toMatchObject({
        engine: 'postgresql',
        advisoryLocks: true,
        savepoints: true,
        serializable: true,
        skipLocked: true,
        btreeGist: 'installed',
      });
    } finally {
      await pool.end();
    }
  });

  it('session mode: a session is a session, nothing is refused', async () => {
    const caps = (await capabilities(session.url))._unsafeUnwrap();
    expect(caps.transactionPooler).toBeUndefined();
    expect(caps.sessionLocks).toBe(true);
    expect(caps.listenNotify).toBe(true);
    expect(caps.unsupported).toEqual({});
  });
});
