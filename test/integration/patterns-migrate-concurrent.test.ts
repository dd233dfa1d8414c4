import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrateSingleRun } from '../../src/advisory/single-run.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { createTestDatabase } from '../../src/testing/test-database.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { serverUrl } from '../helpers.js';

// A deploy: many replicas start at once on a database that has never seen pg-txkit (cloned from
// template0: no btree_gist, no tables), each with the README's setup — its own pool, nothing else.
const fresh = await createTestDatabase(serverUrl(), { template: 'template0', prefix: 'fresh' });
const REPLICAS = 30;
const pools = Array.from({ length: REPLICAS }, () => new pg.Pool({ connectionString: fresh.url }));
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  // pool.end() resolves before its sockets are closed; DROP DATABASE … WITH (FORCE) would terminate the
  // sessions still closing (57P01 to pools that have ended). Bounded wait until they are gone.
  const admin = new pg.Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    for (let i = 0; i < 1000; i++) {
      // pg_stat_activity read: no lock.
      const { rows } = await admin.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
        [fresh.name],
      );
      if (rows[0]?.n === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  } finally {
    await admin.end();
  }
  await fresh.drop();
});

/** Settles every call: a rejection is recorded, not thrown, so the test can say how many rejected. */
async function settle<T>(calls: PromiseLike<T>[]): Promise<{ values: T[]; rejected: unknown[] }> {
  const outcomes = await Promise.allSettled(calls.map((c) => Promise.resolve(c)));
  return {
    values: outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : [])),
    rejected: outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : [])),
  };
}

describe('migrations from many processes at once, first time, on a fresh database', () => {
  it('Bookings.migrate: 30 replicas (two tables) all Ok, btree_gist installed once, one constraint per table', async () => {
    await pools[0]!.query(`CREATE TABLE rooms_a (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL);
      CREATE TABLE rooms_b (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL)`);
    const { values, rejected } = await settle(
      pools.map((pool, i) =>
        new Bookings({
          table: i % 2 === 0 ? 'rooms_a' : 'rooms_b',
          resource: 'room',
          during: 'during',
        }).migrate(pool),
      ),
    );
    expect(rejected).toEqual([]);
    expect(values.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind)).toEqual([]);
    expect(values.filter((r) => r._unsafeUnwrap().created)).toHaveLength(2);
    const constraints = await pools[0]!.query(
      "SELECT conrelid::regclass::text AS t, conname FROM pg_constraint WHERE contype = 'x' ORDER BY 1",
    );
    expect(constraints.rows).toEqual([
      { t: 'rooms_a', conname: 'rooms_a_no_overlap' },
      { t: 'rooms_b', conname: 'rooms_b_no_overlap' },
    ]);
  });

  it('IdempotencyKeys.migrate: 30 replicas all Ok, one table and its index', async () => {
    const { values, rejected } = await settle(
      pools.map((pool) => new IdempotencyKeys(new TxManager(pool), { table: 'payment_keys' }).migrate()),
    );
    expect(rejected).toEqual([]);
    expect(values.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind)).toEqual([]);
    const idx = await pools[0]!.query(
      "SELECT indexname FROM pg_indexes WHERE tablename = 'payment_keys' ORDER BY 1",
    );
    expect(idx.rows.map((r) => r.indexname)).toEqual(['payment_keys_created_at_idx', 'payment_keys_pkey']);
  });

  it('migrateSingleRun: 30 replicas all resolve to Ok (never a rejected promise), one table', async () => {
    const { values, rejected } = await settle(
      pools.map((pool) => migrateSingleRun(pool, { table: 'job_runs' })),
    );
    expect(rejected).toEqual([]);
    expect(values.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind)).toEqual([]);
    const t = await pools[0]!.query("SELECT count(*)::int AS n FROM pg_class WHERE relname = 'job_runs'");
    expect(t.rows[0]?.n).toBe(1);
  });
});
