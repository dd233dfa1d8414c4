import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  backendPid,
  detectTransactionPooler,
  type PidQueryable,
} from '../../src/capabilities/detect-transaction-pooler.js';
import { findPgBouncer, type StartedPgBouncer, startPgBouncer } from '../../src/testing/pgbouncer.js';
import { useTestDatabase } from '../helpers.js';

// The transaction-pooler probe against the case that fooled its backend-pid steps: other clients keep
// the session's server connection busy while the probe connection asks for its pid, so the probe is
// served by another backend, and the pooler then hands the session its old backend again. The queue
// worker then LISTENed through a transaction-mode PgBouncer and was deaf (seen as a flaky refusal test
// when the worker's own polling kept that backend busy). Without pgbouncer, vitest.config.ts leaves this
// file out with one line saying so (and fails the run when PG_TXKIT_REQUIRE_PGBOUNCER=1, as .ci/run sets).
const { url } = await useTestDatabase({ max: 2 });
const binary = await findPgBouncer();

async function connected(connectionString: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/**
 * Runs the probe with a third client (`pinner`) that, while the probe connection asks for its pid,
 * holds the session's backend in an open transaction, and lets it go right after. PgBouncer reuses
 * the most recently released server connection first (its default), so behind a transaction pooler
 * the session's second statement lands on its first backend again. Returns the probe's answer and the
 * pids each statement of the backend-pid steps was served by.
 */
async function probeWithPinnedBackend(poolerUrl: string) {
  const session = await connected(poolerUrl);
  const pinner = await connected(poolerUrl);
  const pids = { session: [] as number[], probe: [] as number[] };
  try {
    const recording: PidQueryable = {
      query: async <R extends Record<string, unknown>>(text: string) => {
        const result = await session.query<R>(text);
        if (text.includes('pg_backend_pid')) pids.session.push(Number(result.rows[0]?.pid));
        return result;
      },
    };
    const found = await detectTransactionPooler(
      Object.assign(recording, {
        on: session.on.bind(session),
        removeListener: session.removeListener.bind(session),
      }),
      async () => {
        // No lock: an open transaction pins the server connection that runs it until ROLLBACK.
        await pinner.query('BEGIN');
        await pinner.query('SELECT 1');
        const probe = await connected(poolerUrl);
        let first = true;
        const wrapped: PidQueryable & { end(): Promise<void> } = {
          query: async <R extends Record<string, unknown>>(text: string) => {
            const result = await probe.query<R>(text);
            if (first) {
              first = false;
              pids.probe.push(Number(result.rows[0]?.pid));
              await pinner.query('ROLLBACK');
            }
            return result;
          },
          end: () => probe.end(),
        };
        return wrapped;
      },
      (probe) => probe.end(),
    );
    const { rows } = await session.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM pg_listening_channels()',
    );
    return { found, pids, listening: rows[0]?.n };
  } finally {
    await session.end().catch(() => {});
    await pinner.end().catch(() => {});
  }
}

describe.runIf(binary)('the transaction-pooler probe', () => {
  let transaction: StartedPgBouncer;
  let session: StartedPgBouncer;
  beforeAll(async () => {
    transaction = await startPgBouncer({ target: url, poolMode: 'transaction', poolSize: 2 });
    session = await startPgBouncer({ target: url, poolMode: 'session', poolSize: 4 });
  });
  afterAll(async () => {
    await transaction?.stop();
    await session?.stop();
  });

  it('transaction mode, session backend pinned by another client: the pids look like a session, the NOTIFY round trip finds the pooler', async () => {
    const { found, pids } = await probeWithPinnedBackend(transaction.url);
    // The control: what the backend-pid steps alone saw. Two connections on two backends, and the
    // session's two statements on one: exactly what a real session shows.
    expect(pids.session).toHaveLength(2);
    expect(pids.session[1]).toBe(pids.session[0]);
    expect(pids.probe[0]).not.toBe(pids.session[0]);
    expect(found.evidence).toMatch(
      /a NOTIFY from a second connection did not reach this connection's LISTEN/,
    );
  });

  it('session mode, same schedule: no evidence, and the probe leaves no LISTEN behind', async () => {
    const { found, pids, listening } = await probeWithPinnedBackend(session.url);
    expect(pids.session[1]).toBe(pids.session[0]);
    expect(found).toEqual({ pid: pids.session[0], evidence: undefined });
    expect(listening).toBe(0);
  });

  it('a direct connection: no evidence, the pid is the session backend, no LISTEN left behind', async () => {
    const client = await connected(url);
    try {
      const found = await detectTransactionPooler(
        client,
        () => connected(url),
        (probe) => probe.end(),
      );
      expect(found).toEqual({ pid: await backendPid(client), evidence: undefined });
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_listening_channels()',
      );
      expect(rows[0]?.n).toBe(0);
    } finally {
      await client.end();
    }
  });
});
