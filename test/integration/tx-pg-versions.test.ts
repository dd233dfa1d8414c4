import oldestPg from 'pg-oldest';
import { afterAll, describe, expect, it } from 'vitest';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { useTestDatabase } from '../helpers.js';

// The oldest pg of the supported range (pg >=8.11 <9), installed as the `pg-oldest` alias: it has no
// client.getTransactionStatus(), which pg added later.
const { pool, url } = await useTestDatabase();
await pool.query('CREATE TABLE v (id int PRIMARY KEY)');

// The README's setup on the old pg: no pool.on('error'); a pool of 2, so one leaked client shows at
// once (the third call would wait forever).
const oldPool = new oldestPg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 5000 });
afterAll(async () => {
  await oldPool.end();
});

describe('pg 8.11 (the oldest supported)', () => {
  it('has no getTransactionStatus (what this suite is about)', async () => {
    const client = await oldPool.connect();
    expect(typeof (client as { getTransactionStatus?: unknown }).getTransactionStatus).toBe('undefined');
    client.release();
  });

  it('tm.do commits, retries a serialization failure, and failing calls leak no client', async () => {
    const tm = new TxManager(oldPool as never, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    expect(
      (await tm.do(async (tx) => (await tx.query('INSERT INTO v VALUES (1)')).rowCount))._unsafeUnwrap(),
    ).toBe(1);
    let calls = 0;
    const retried = await tm.do(async (tx) => {
      calls++;
      if (calls === 1) await tx.query("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$");
      return calls;
    });
    expect(retried._unsafeUnwrap()).toBe(2);
    for (let i = 0; i < 6; i++) {
      // A unique violation (an Err), a defect (rejects), a swallowed error (cannot commit).
      const dup = await tm.do(async (tx) => tx.query('INSERT INTO v VALUES (1)'));
      expect(dup._unsafeUnwrapErr().kind).toBe('UniqueViolation');
      await expect(
        tm.do(async () => {
          throw new TypeError('a bug');
        }),
      ).rejects.toThrow('a bug');
      const swallowed = await tm.do(async (tx) => {
        await tx.query('INSERT INTO v VALUES (1)').catch(() => {});
        return 'ok';
      });
      expect(swallowed._unsafeUnwrapErr().kind).toBe('UniqueViolation');
    }
    expect(oldPool.totalCount - oldPool.idleCount).toBe(0);
    expect(oldPool.waitingCount).toBe(0);
  });

  it('detects a COMMIT sent through tx.query on the old pg too', async () => {
    const tm = new TxManager(oldPool as never);
    await expect(
      tm.do(async (tx) => {
        await tx.query('COMMIT');
        return 'ok';
      }),
    ).rejects.toBeInstanceOf(TxUsageError);
    expect(oldPool.totalCount - oldPool.idleCount).toBe(0);
  });
});
