import knex from 'knex';
import { Kysely, sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { knexConfig } from '../../src/integrations/knex/index.js';
import { kyselyDialect } from '../../src/integrations/kysely/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { useTestDatabase } from '../helpers.js';

// Outside tm.do, what holds a pool client: Knex's raw transaction control, Kysely's db.connection().
const { pooledUrl } = await useTestDatabase();

const pools: pg.Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end()));
});

/** A manager over the README's pool, with `max` clients. */
function manager(max: number) {
  const pool = new pg.Pool({ connectionString: pooledUrl, max });
  pools.push(pool);
  return { pool, tm: new TxManager(pool) };
}

/** Settles `promise`, or rejects once `ms` have passed (so a pinned pool fails the test rather than hanging it). */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still waiting after ${ms} ms: a pool client is pinned`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe('Knex raw transaction control outside tm.do', () => {
  it.each(['BEGIN', 'COMMIT', 'ROLLBACK', 'begin transaction isolation level serializable'])(
    'db.raw(%j) is refused before it is sent and pins no client',
    async (text) => {
      const { pool, tm } = manager(2);
      const db = knex(knexConfig(tm));
      try {
        for (let i = 0; i < 2; i += 1) {
          const refused = await within(
            db.raw(text).then(
              () => undefined,
              (error: unknown) => error,
            ),
            10_000,
          );
          expect(refused).toBeInstanceOf(TxUsageError);
          expect((refused as TxUsageError).reason).toBe('transaction-control');
          expect((refused as TxUsageError).message).toMatch(/db\.transaction\(\) or tm\.do/);
        }
        const { rows } = await within(db.raw<{ rows: { one: number }[] }>('SELECT 1 AS one'), 10_000);
        expect(rows).toEqual([{ one: 1 }]);
        expect(pool.idleCount).toBe(pool.totalCount);
        expect(pool.waitingCount).toBe(0);
      } finally {
        await db.destroy();
      }
    },
  );

  it("inside tm.do, db.raw('BEGIN') is refused before it is sent and the transaction cannot commit", async () => {
    const { pool, tm } = manager(2);
    const db = knex(knexConfig(tm));
    try {
      let caught: unknown;
      const outcome = await tm
        .do(async () => {
          await db.raw('BEGIN').catch((error: unknown) => {
            caught = error;
          });
          return 'ok';
        })
        .then(
          (value) => value,
          (error: unknown) => error,
        );
      expect(caught).toBeInstanceOf(TxUsageError);
      expect(outcome).toBeInstanceOf(TxUsageError);
      expect(pool.idleCount).toBe(pool.totalCount);
    } finally {
      await db.destroy();
    }
  });

  it("Knex's own db.transaction() still commits, and the pool is whole afterwards", async () => {
    const { pool, tm } = manager(2);
    const db = knex(knexConfig(tm));
    try {
      const pid = await within(
        db.transaction(async (trx) => {
          const { rows } = await trx.raw<{ rows: { pid: number; xid: string }[] }>(
            'SELECT pg_backend_pid() AS pid, txid_current_if_assigned()::text AS xid',
          );
          await trx.raw('SELECT txid_current()');
          return rows[0]?.pid;
        }),
        10_000,
      );
      expect(pid).toBeTypeOf('number');
      expect(pool.idleCount).toBe(pool.totalCount);
    } finally {
      await db.destroy();
    }
  });
});

describe('Kysely db.connection() outside tm.do', () => {
  it('runs every query of the callback on one backend while other pool traffic runs', async () => {
    const { pool, tm } = manager(4);
    const db = new Kysely<Record<string, never>>({ dialect: kyselyDialect(tm) });
    const pidQuery = sql<{ pid: number }>`select pg_backend_pid() as pid`;
    const pids = await db.connection().execute(async (conn) => {
      const first = (await pidQuery.execute(conn)).rows[0]?.pid;
      // Other queries on the pool in between, each on whichever client is free.
      await Promise.all([1, 2, 3].map(() => pidQuery.execute(db)));
      const second = (await pidQuery.execute(conn)).rows[0]?.pid;
      return [first, second];
    });
    expect(pids[0]).toBeTypeOf('number');
    expect(pids[1]).toBe(pids[0]);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it('an advisory lock taken in the callback is unlocked in it (the same session)', async () => {
    const { pool, tm } = manager(4);
    const db = new Kysely<Record<string, never>>({ dialect: kyselyDialect(tm) });
    const unlocked = await db.connection().execute(async (conn) => {
      // A session-level advisory lock on key 42: held by this backend until it unlocks it.
      await sql`select pg_advisory_lock(42)`.execute(conn);
      await Promise.all([1, 2, 3].map(() => sql`select 1`.execute(db)));
      // pg_advisory_unlock returns false (and a warning) when this session does not hold the lock.
      return (await sql<{ unlocked: boolean }>`select pg_advisory_unlock(42) as unlocked`.execute(conn))
        .rows[0]?.unlocked;
    });
    expect(unlocked).toBe(true);
    const held = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 42",
    );
    expect(held.rows[0]?.n).toBe(0);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it('a query the server refuses inside db.connection() gives the client back to the pool', async () => {
    const { pool, tm } = manager(1);
    const db = new Kysely<Record<string, never>>({ dialect: kyselyDialect(tm) });
    const refused = await db
      .connection()
      .execute(async (conn) => sql`select 1 / 0`.execute(conn))
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect((refused as { code?: string }).code).toBe('22012');
    const { rows } = await within(sql<{ one: number }>`select 1 as one`.execute(db), 10_000);
    expect(rows).toEqual([{ one: 1 }]);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it('inside tm.do, db.connection() runs on the transaction', async () => {
    const { tm } = manager(2);
    const db = new Kysely<Record<string, never>>({ dialect: kyselyDialect(tm) });
    const result = await tm.doOrThrow(async (tx) => {
      const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const inner = await db
        .connection()
        .execute(
          async (conn) =>
            (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(conn)).rows[0]?.pid,
        );
      return [rows[0]?.pid, inner];
    });
    expect(result[1]).toBe(result[0]);
  });
});
