import { err } from 'neverthrow';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Tx } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import { leftovers } from './patterns-support.js';

const { pool } = await useTestDatabase();
const tm = new TxManager(pool);
const keys = new IdempotencyKeys(tm, { table: 'payment_requests' });
const failFast = new IdempotencyKeys(tm, { table: 'payment_requests', onConcurrent: 'fail' });
await pool.query('CREATE TABLE payments (id serial PRIMARY KEY, amount int NOT NULL)');
(await keys.migrate())._unsafeUnwrap();

beforeEach(async () => {
  await pool.query('TRUNCATE payments, payment_requests RESTART IDENTITY');
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

const pay = (amount: number) => async (tx: Tx) => {
  const { rows } = await tx.query<{ id: number }>('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [
    amount,
  ]);
  return { paymentId: rows[0]!.id, amount };
};
const paymentCount = async () =>
  (await pool.query('SELECT count(*)::int AS n FROM payments')).rows[0].n as number;

describe('IdempotencyKeys', () => {
  it('migrate() is idempotent', async () => {
    expect((await Promise.all([keys.migrate(), keys.migrate()])).every((r) => r.isOk())).toBe(true);
  });

  it('runs fn once per key and replays the stored JSON result', async () => {
    const first = await keys.run('req-1', pay(100), { fingerprint: 'f1' });
    expect(first._unsafeUnwrap()).toEqual({ result: { paymentId: 1, amount: 100 }, replayed: false });
    const again = await keys.run('req-1', pay(100), { fingerprint: 'f1' });
    expect(again._unsafeUnwrap()).toEqual({ result: { paymentId: 1, amount: 100 }, replayed: true });
    expect(await paymentCount()).toBe(1);
    const other = await keys.run('req-2', pay(5));
    expect(other._unsafeUnwrap().replayed).toBe(false);
    expect(await paymentCount()).toBe(2);
  });

  it('same key, different fingerprint → IdempotencyConflict', async () => {
    (await keys.run('req-f', pay(1), { fingerprint: 'a' }))._unsafeUnwrap();
    const r = await keys.run('req-f', pay(2), { fingerprint: 'b' });
    expect(r._unsafeUnwrapErr()).toMatchObject({ kind: 'IdempotencyConflict', key: 'req-f' });
  });

  it('fn failing (Err or throw) rolls the key back with the work, so a retry runs', async () => {
    const failed = await keys.run('req-e', async (tx) => {
      await pay(7)(tx);
      return err(new ConditionFailed());
    });
    expect(failed._unsafeUnwrapErr().kind).toBe('ConditionFailed');
    await expect(
      keys.run('req-e', async () => {
        throw new TypeError('bug');
      }),
    ).rejects.toThrow('bug');
    expect(await paymentCount()).toBe(0);
    const retried = await keys.run('req-e', pay(7));
    expect(retried._unsafeUnwrap().replayed).toBe(false);
    expect(await paymentCount()).toBe(1);
  });

  it("joins the caller's transaction: the caller's rollback forgets the key and the effect", async () => {
    const outer = await tm.do(async () => {
      (await keys.run('req-tx', pay(3)))._unsafeUnwrap();
      return err(new ConditionFailed()); // the caller decides to roll back
    });
    expect(outer.isErr()).toBe(true);
    expect(await paymentCount()).toBe(0);
    expect((await pool.query('SELECT count(*)::int AS n FROM payment_requests')).rows[0].n).toBe(0);
    // a caller that swallows fn's failure and commits does not leave a key without a result
    await tm.doOrThrow(async () => {
      const r = await keys.run('req-swallow', async () => err(new ConditionFailed()));
      expect(r.isErr()).toBe(true);
    });
    expect((await keys.run('req-swallow', pay(4)))._unsafeUnwrap().replayed).toBe(false);
  });

  it("a concurrent duplicate waits for the first and replays ('wait'), or gets InProgress ('fail')", async () => {
    const g = gate();
    const first = keys.run('req-c', async (tx) => {
      const r = await pay(50)(tx);
      await g.at('paid');
      return r;
    });
    await g.reached('paid');
    const probe = await failFast.run('req-c', pay(50));
    expect(probe._unsafeUnwrapErr()).toMatchObject({ kind: 'InProgress', key: 'req-c' });
    let secondDone = false;
    const second = keys.run('req-c', pay(50)).map((v) => {
      secondDone = true;
      return v;
    });
    // the duplicate is blocked on the advisory lock while the first transaction is open
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      const w = await pool.query(
        "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
      );
      if (w.rows[0].n > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(secondDone).toBe(false);
    g.open('paid');
    expect((await first)._unsafeUnwrap().replayed).toBe(false);
    expect((await second)._unsafeUnwrap()).toEqual({ result: { paymentId: 1, amount: 50 }, replayed: true });
    expect(await paymentCount()).toBe(1);
  });

  it('a duplicate waiting on a first run that rolls back runs the work itself', async () => {
    const g = gate();
    const first = keys.run('req-rb', async (tx) => {
      await pay(1)(tx);
      await g.at('before-fail');
      return err(new ConditionFailed());
    });
    await g.reached('before-fail');
    const second = keys.run('req-rb', pay(2));
    g.open('before-fail');
    expect((await first)._unsafeUnwrapErr().kind).toBe('ConditionFailed');
    expect((await second)._unsafeUnwrap()).toEqual({ result: { paymentId: 2, amount: 2 }, replayed: false });
  });

  it('many concurrent duplicates: one effect, every caller gets the same result', async () => {
    const results = await Promise.all(Array.from({ length: 10 }, () => keys.run('req-many', pay(9))));
    const values = results.map((r) => r._unsafeUnwrap());
    expect(values.filter((v) => !v.replayed)).toHaveLength(1);
    for (const v of values) expect(v.result).toEqual({ paymentId: 1, amount: 9 });
    expect(await paymentCount()).toBe(1);
  });

  it('keys older than the ttl are forgotten; expire() deletes them', async () => {
    (await keys.run('old', pay(1)))._unsafeUnwrap();
    (await keys.run('new', pay(1)))._unsafeUnwrap();
    await pool.query("UPDATE payment_requests SET created_at = now() - interval '2 days' WHERE key = 'old'");
    expect((await keys.run('old', pay(1)))._unsafeUnwrap().replayed).toBe(false); // ttl 24h: runs again
    await pool.query("UPDATE payment_requests SET created_at = now() - interval '2 days' WHERE key = 'old'");
    expect((await keys.expire())._unsafeUnwrap()).toBe(1);
    expect((await keys.expire('1ms'))._unsafeUnwrap()).toBe(1);
    expect((await keys.expire('soon'))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
  });

  it('a 63-character table name: migrate() creates the created_at index under a name that fits', async () => {
    const long = `k${'y'.repeat(62)}`;
    const longKeys = new IdempotencyKeys(tm, { table: long });
    (await longKeys.migrate())._unsafeUnwrap();
    const idx = await pool.query<{ indexname: string; indexdef: string }>(
      'SELECT indexname, indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname',
      [long],
    );
    const createdAt = idx.rows.filter((r) => r.indexdef.includes('(created_at)'));
    expect(createdAt).toHaveLength(1);
    expect(Buffer.byteLength(createdAt[0]!.indexname)).toBeLessThanOrEqual(63);
    expect((await longKeys.migrate()).isOk()).toBe(true);
  });

  it('a BigInt in the result is stored losslessly and replayed as the same BigInt (never a rejection)', async () => {
    const id = 12_345_678_901_234_567_890n;
    const first = await keys.run('bigint-1', () => ({ paymentId: id, cents: [1n] }));
    expect(first._unsafeUnwrap()).toEqual({ result: { paymentId: id, cents: [1n] }, replayed: false });
    const replay = await keys.run('bigint-1', () => ({ paymentId: 0n, cents: [] }));
    expect(replay._unsafeUnwrap()).toEqual({ result: { paymentId: id, cents: [1n] }, replayed: true });
  });

  it('a result that cannot be stored (a cycle) → InvalidOptions, the key and the effect roll back', async () => {
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    const r = await keys.run('cyclic-1', async (tx) => {
      await pay(5)(tx);
      return cyclic;
    });
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(await paymentCount()).toBe(0);
    expect((await keys.run('cyclic-1', () => 'ran'))._unsafeUnwrap()).toEqual({
      result: 'ran',
      replayed: false,
    });
  });

  it('bad keys and options → InvalidOptions before SQL', async () => {
    expect((await keys.run('', pay(1)))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect((await keys.run('k', pay(1), { fingerprint: '' }))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(() => new IdempotencyKeys(tm, { table: 'x"y' })).toThrow(/invalid options/);
    expect(() => new IdempotencyKeys(tm, { ttl: '-1d' })).toThrow(/invalid options/);
    expect(await paymentCount()).toBe(0);
  });
});
