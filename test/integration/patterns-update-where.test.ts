import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { updateWhere } from '../../src/patterns/update-where.js';
import { useTestDatabase } from '../helpers.js';
import { connect, endAll, leftovers, pidOf, waitUntilBlocked } from './patterns-support.js';

const { pool, url } = await useTestDatabase();
await pool.query(`CREATE TABLE stock (sku text PRIMARY KEY, left_units int NOT NULL CHECK (left_units >= 0));
  CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, version int NOT NULL DEFAULT 1)`);

beforeEach(async () => {
  await pool.query(`TRUNCATE stock, docs; INSERT INTO stock VALUES ('apple', 5), ('pear', 1), ('plum', 1);
    INSERT INTO docs VALUES (1, 'v1', 1)`);
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

const decrement = (sku: string, n: number) => ({
  text: 'UPDATE stock SET left_units = left_units - $2 WHERE sku = $1 AND left_units >= $2 RETURNING left_units',
  values: [sku, n],
});

describe('updateWhere', () => {
  it('returns the changed rows when the condition holds', async () => {
    const r = await updateWhere<{ left_units: number }>(pool, decrement('apple', 3));
    expect(r._unsafeUnwrap()).toEqual([{ left_units: 2 }]);
  });

  it('0 rows is ConditionFailed, never a silent success', async () => {
    const r = await updateWhere(pool, decrement('apple', 6));
    expect(r._unsafeUnwrapErr().kind).toBe('ConditionFailed');
    const left = await pool.query("SELECT left_units FROM stock WHERE sku = 'apple'");
    expect(left.rows[0].left_units).toBe(5);
  });

  it('tells NotFound from ConditionFailed with notFound', async () => {
    const missing = await updateWhere(pool, decrement('kiwi', 1), {
      notFound: { table: 'stock', key: 'sku', id: 'kiwi' },
    });
    expect(missing._unsafeUnwrapErr().kind).toBe('NotFound');
    const short = await updateWhere(pool, decrement('pear', 2), {
      notFound: { table: 'stock', key: 'sku', id: 'pear' },
    });
    expect(short._unsafeUnwrapErr().kind).toBe('ConditionFailed');
  });

  it("expect 'some' accepts many rows; expect 'one' with many rows is a defect (throws)", async () => {
    const some = await updateWhere(
      pool,
      {
        text: "UPDATE stock SET left_units = left_units - 1 WHERE sku IN ('pear', 'plum') AND left_units >= 1",
      },
      { expect: 'some' },
    );
    expect(some._unsafeUnwrap()).toHaveLength(0); // no RETURNING: rows empty, rowCount 2
    const client = await connect(url);
    try {
      await client.query('BEGIN');
      await expect(
        updateWhere(client, { text: 'UPDATE stock SET left_units = left_units + 1' }, { expect: 'one' }),
      ).rejects.toThrow(/does not identify one row/);
      await client.query('ROLLBACK');
    } finally {
      await endAll(client);
    }
  });

  it('optimistic versioning: a stale version is ConditionFailed', async () => {
    const bump = (version: number, body: string) => ({
      text: 'UPDATE docs SET body = $3, version = version + 1 WHERE id = $1 AND version = $2 RETURNING version',
      values: [1, version, body],
    });
    expect((await updateWhere(pool, bump(1, 'mine')))._unsafeUnwrap()).toEqual([{ version: 2 }]);
    expect((await updateWhere(pool, bump(1, 'theirs')))._unsafeUnwrapErr().kind).toBe('ConditionFailed');
  });

  it('database errors come back classified (CheckViolation, DbError)', async () => {
    const check = await updateWhere(pool, { text: "UPDATE stock SET left_units = -1 WHERE sku = 'apple'" });
    expect(check._unsafeUnwrapErr().kind).toBe('CheckViolation');
    const bad = await updateWhere(pool, { text: 'UPDATE no_such_table SET x = 1' });
    expect(bad._unsafeUnwrapErr()).toMatchObject({ kind: 'DbError', code: '42P01' });
  });

  it('bad options are InvalidOptions before any SQL', async () => {
    const r1 = await updateWhere(pool, { text: '  ' });
    expect(r1._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const r2 = await updateWhere(pool, decrement('apple', 1), {
      notFound: { table: 'stock; DROP TABLE stock', key: 'sku', id: 'apple' },
    });
    expect(r2._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const r3 = await updateWhere(pool, decrement('apple', 1), { expect: 'all' as never });
    expect(r3._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const left = await pool.query("SELECT left_units FROM stock WHERE sku = 'apple'");
    expect(left.rows[0].left_units).toBe(5);
  });

  it('a blocked conditional UPDATE re-checks its WHERE after the other commits and updates 0 rows', async () => {
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    try {
      const pid2 = await pidOf(t2);
      await t1.query('BEGIN');
      await t2.query('BEGIN');
      expect((await updateWhere(t1, decrement('pear', 1)))._unsafeUnwrap()).toEqual([{ left_units: 0 }]);
      const blocked = updateWhere(t2, decrement('pear', 1));
      await waitUntilBlocked(monitor, pid2);
      await t1.query('COMMIT');
      expect((await blocked)._unsafeUnwrapErr().kind).toBe('ConditionFailed');
      await t2.query('COMMIT');
      const left = await pool.query("SELECT left_units FROM stock WHERE sku = 'pear'");
      expect(left.rows[0].left_units).toBe(0);
    } finally {
      await endAll(t1, t2, monitor);
    }
  });

  it('at repeatable read the same interleaving is a SerializationFailure (retry the transaction)', async () => {
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    try {
      const pid2 = await pidOf(t2);
      await t1.query('BEGIN');
      await t2.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await t2.query('SELECT 1 FROM stock LIMIT 1'); // take the snapshot now
      expect((await updateWhere(t1, decrement('apple', 1))).isOk()).toBe(true);
      const blocked = updateWhere(t2, decrement('apple', 1));
      await waitUntilBlocked(monitor, pid2);
      await t1.query('COMMIT');
      expect((await blocked)._unsafeUnwrapErr().kind).toBe('SerializationFailure');
      await t2.query('ROLLBACK');
    } finally {
      await endAll(t1, t2, monitor);
    }
  });
});
