import type * as NeverthrowModule from 'neverthrow';
import type PgModule from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type * as ZodModule from 'zod/v4';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { Queue } from '../../src/queue/queue.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { secondCopy } from '../fixtures/second-copies.js';
import { useTestDatabase } from '../helpers.js';

// The service's own copies of pg, neverthrow and zod: not the ones pg-txkit resolves.
const userPg = secondCopy<typeof PgModule>('pg');
const userNt = secondCopy<typeof NeverthrowModule>('neverthrow');
const userZod = secondCopy<typeof ZodModule>('zod');

const { url, pool: ourPool } = await useTestDatabase();
const pool = new userPg.Pool({ connectionString: url, max: 4 });
afterAll(() => pool.end());

async function count(table: string): Promise<number> {
  const r = await ourPool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return r.rows[0]?.n ?? 0;
}

describe("the user's own copies of pg, neverthrow and zod", () => {
  it('the copies really are other classes', async () => {
    const ours = await import('pg');
    expect(pool instanceof ours.default.Pool).toBe(false);
    const nt = await import('neverthrow');
    expect(userNt.err(1) instanceof nt.Err).toBe(false);
    // (zod 4 answers instanceof across its own copies by a marker; zod 3 schemas and other Standard
    // Schema libraries do not: see the hand-written Standard Schema below.)
  });

  it("TxManager runs on the user's pg.Pool and rolls back on the user's neverthrow err", async () => {
    await ourPool.query('CREATE TABLE copies_tx (id int PRIMARY KEY)');
    const tm = new TxManager(pool);
    const r = await tm.do(async (tx) => {
      await tx.query('INSERT INTO copies_tx VALUES (1)');
      return userNt.err('refused' as const);
    });
    expect(r.isErr() && r.error).toBe('refused');
    expect(await count('copies_tx')).toBe(0);
  });

  it("SessionLock.acquire takes the user's pg.Pool (a pool from another pg copy was not recognised)", async () => {
    const lock = await SessionLock.acquire(pool, advisoryKey('copies', 'leader'));
    expect(lock.isOk(), lock.isErr() ? lock.error.message : '').toBe(true);
    if (lock.isOk()) expect((await lock.value.release()).unlocked).toBe(true);
  });

  it("withAdvisoryLock rolls back on the user's neverthrow err (it used to commit it as a value)", async () => {
    await ourPool.query('CREATE TABLE copies_lock (id int PRIMARY KEY)');
    const tm = new TxManager(pool);
    const r = await withAdvisoryLock(tm, advisoryKey('copies', 'lock'), async (tx) => {
      await tx.query('INSERT INTO copies_lock VALUES (1)');
      return userNt.err('refused' as const);
    });
    expect(r.isErr() && r.error).toBe('refused');
    expect(await count('copies_lock')).toBe(0);
  });

  it("IdempotencyKeys.run rolls the key back on the user's neverthrow err", async () => {
    const tm = new TxManager(pool);
    const keys = new IdempotencyKeys(tm, { table: 'copies_keys' });
    (await keys.migrate())._unsafeUnwrap();
    const r = await keys.run('k1', () => userNt.err('declined' as const));
    expect(r.isErr() && r.error).toBe('declined');
    expect(await count('copies_keys')).toBe(0);
  });

  it("Queue takes task schemas from the user's zod and validates payloads with them", async () => {
    const tm = new TxManager(pool);
    const queue = new Queue({
      pool,
      txManager: tm,
      schema: 'copies_queue',
      tasks: { email: userZod.object({ to: userZod.email() }) },
    });
    (await queue.migrate())._unsafeUnwrap();
    const bad = await queue.enqueue(pool, 'email', { to: 'not an address' });
    expect(bad.isErr() && bad.error.kind).toBe('InvalidOptions');
    expect(bad.isErr() && bad.error.kind === 'InvalidOptions' && bad.error.issues[0]?.path).toEqual([
      'payload',
      'to',
    ]);
    const good = await queue.enqueue(pool, 'email', { to: 'a@example.com' });
    expect(good.isOk()).toBe(true);
    const [job] = (await queue.claim({ batch: 1 }))._unsafeUnwrap();
    expect(job?.payload).toEqual({ to: 'a@example.com' });
  });

  it('Queue takes any Standard Schema (not only zod)', async () => {
    const tm = new TxManager(pool);
    const positive = {
      '~standard': {
        version: 1 as const,
        vendor: 'hand-written',
        validate: (v: unknown) =>
          typeof v === 'number' && v > 0 ? { value: v } : { issues: [{ message: 'a positive number' }] },
        types: undefined as { input: number; output: number } | undefined,
      },
    };
    const queue = new Queue({ pool, txManager: tm, schema: 'copies_std', tasks: { n: positive } });
    (await queue.migrate())._unsafeUnwrap();
    const bad = await queue.enqueue(pool, 'n', -1);
    expect(bad.isErr() && bad.error.kind === 'InvalidOptions' && bad.error.issues).toEqual([
      { path: ['payload'], message: 'a positive number' },
    ]);
    expect((await queue.enqueue(pool, 'n', 3)).isOk()).toBe(true);
  });
});
