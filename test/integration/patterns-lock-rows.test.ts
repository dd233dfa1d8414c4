import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { lockRows } from '../../src/patterns/lock-rows.js';
import { useTestDatabase } from '../helpers.js';
import { connect, endAll, leftovers, pidOf, waitUntilBlocked } from './patterns-support.js';

const { pool, url } = await useTestDatabase();
await pool.query(`CREATE SCHEMA billing;
  CREATE TABLE billing.wallets (id int PRIMARY KEY, balance int NOT NULL, owner text);
  CREATE TABLE billing.payments (id serial PRIMARY KEY, wallet_id int NOT NULL REFERENCES billing.wallets (id));
  CREATE TABLE billing.cards (id uuid PRIMARY KEY, label text);
  INSERT INTO billing.cards VALUES ('6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b', 'one')`);

beforeEach(async () => {
  await pool.query(`TRUNCATE billing.wallets CASCADE;
    INSERT INTO billing.wallets SELECT g, 100, 'o' || g FROM generate_series(1, 20) g`);
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

type Wallet = { id: number; balance: number };

describe('lockRows', () => {
  it('refuses to run outside a transaction (NotInTransaction), for a pool and an autocommit client', async () => {
    expect((await lockRows(pool, { table: 'billing.wallets', ids: [1] }))._unsafeUnwrapErr().kind).toBe(
      'NotInTransaction',
    );
    const c = await connect(url);
    try {
      expect((await lockRows(c, { table: 'billing.wallets', ids: [1] }))._unsafeUnwrapErr().kind).toBe(
        'NotInTransaction',
      );
    } finally {
      await endAll(c);
    }
  });

  it('returns rows in key order and the missing ids; takes the requested lock mode', async () => {
    const c = await connect(url);
    try {
      await c.query('BEGIN');
      const r = await lockRows<Wallet>(c, {
        table: 'billing.wallets',
        ids: [7, 3, 99, 3, 5],
        columns: ['balance'],
      });
      expect(r._unsafeUnwrap()).toEqual({
        rows: [
          { id: 3, balance: 100 },
          { id: 5, balance: 100 },
          { id: 7, balance: 100 },
        ],
        missing: [99],
      });
      // The rows are locked FOR NO KEY UPDATE: a foreign-key insert (FOR KEY SHARE) is not blocked...
      await pool.query('INSERT INTO billing.payments (wallet_id) VALUES (3)');
      // ...but a FOR UPDATE NOWAIT from another session is refused.
      const other = await pool
        .query('SELECT 1 FROM billing.wallets WHERE id = 3 FOR UPDATE NOWAIT')
        .catch((e) => e);
      expect(other.code).toBe('55P03');
      await c.query('COMMIT');
    } finally {
      await endAll(c);
    }
  });

  it("mode 'update' blocks a foreign-key insert on a child row (why 'no key update' is the default)", async () => {
    const [c, child, monitor] = [await connect(url), await connect(url), await connect(url)];
    try {
      const childPid = await pidOf(child);
      await c.query('BEGIN');
      (await lockRows(c, { table: 'billing.wallets', ids: [4], mode: 'update' }))._unsafeUnwrap();
      const insert = child.query('INSERT INTO billing.payments (wallet_id) VALUES (4)');
      await waitUntilBlocked(monitor, childPid);
      await c.query('COMMIT');
      await insert;
    } finally {
      await endAll(c, child, monitor);
    }
  });

  it('the lock order is the ORDER BY: LockRows sits above the ordered scan in the plan', async () => {
    const c = await connect(url);
    try {
      for (const sql of [
        'SELECT * FROM billing.wallets WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE',
        // force the Sort plan too (no index scan)
        'SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off',
      ]) {
        await c.query('BEGIN');
        if (sql.startsWith('SET')) await c.query(sql);
        const plan = await c.query(
          `EXPLAIN (FORMAT JSON) SELECT * FROM billing.wallets WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`,
          [[5, 1, 3]],
        );
        const top = plan.rows[0]['QUERY PLAN'][0].Plan;
        expect(top['Node Type']).toBe('LockRows');
        expect(['Sort', 'Index Scan']).toContain(top.Plans[0]['Node Type']);
        await c.query('ROLLBACK');
      }
    } finally {
      await endAll(c);
    }
  });

  it("wait 'nowait' → LockNotAvailable (55P03) at once; 'skipLocked' → the free rows, the locked ones in missing", async () => {
    const [holder, c] = [await connect(url), await connect(url)];
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM billing.wallets WHERE id = 2 FOR UPDATE');
      await c.query('BEGIN');
      const nowait = await lockRows(c, { table: 'billing.wallets', ids: [1, 2], wait: 'nowait' });
      expect(nowait._unsafeUnwrapErr()).toMatchObject({ kind: 'LockNotAvailable', code: '55P03' });
      await c.query('ROLLBACK');
      await c.query('BEGIN');
      const skip = await lockRows<Wallet>(c, {
        table: 'billing.wallets',
        ids: [1, 2, 3],
        wait: 'skipLocked',
      });
      expect(skip._unsafeUnwrap().rows.map((r) => r.id)).toEqual([1, 3]);
      expect(skip._unsafeUnwrap().missing).toEqual([2]);
      await c.query('COMMIT');
      await holder.query('COMMIT');
    } finally {
      await endAll(holder, c);
    }
  });

  it('opposite-order transfers: naive row-by-row locking deadlocks (40P01), lockRows never does', async () => {
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    const [pid1, pid2] = [await pidOf(t1), await pidOf(t2)];
    const debit = 'UPDATE billing.wallets SET balance = balance - 10 WHERE id = $1';
    const credit = 'UPDATE billing.wallets SET balance = balance + 10 WHERE id = $1';
    try {
      // Naive: each transfer locks its "from" row first, in the caller's order.
      await t1.query('BEGIN');
      await t2.query('BEGIN');
      await t1.query(debit, [1]);
      await t2.query(debit, [2]);
      const a = t1.query(credit, [2]).then(
        () => 'ok',
        (e) => e.code,
      );
      await waitUntilBlocked(monitor, pid1);
      const b = t2.query(credit, [1]).then(
        () => 'ok',
        (e) => e.code,
      );
      const outcomes = await Promise.all([a, b]);
      expect(outcomes.sort()).toEqual(['40P01', 'ok']);
      await t1.query('ROLLBACK');
      await t2.query('ROLLBACK');

      // With lockRows: both lock {1, 2} in key order in one statement; the second waits holding nothing.
      await t1.query('BEGIN');
      await t2.query('BEGIN');
      expect((await lockRows(t1, { table: 'billing.wallets', ids: [1, 2] })).isOk()).toBe(true);
      await t1.query(debit, [1]);
      const second = lockRows(t2, { table: 'billing.wallets', ids: [2, 1] });
      await waitUntilBlocked(monitor, pid2);
      await t1.query(credit, [2]);
      await t1.query('COMMIT');
      expect((await second).isOk()).toBe(true);
      await t2.query(debit, [2]);
      await t2.query(credit, [1]);
      await t2.query('COMMIT');
      const sum = await pool.query('SELECT balance FROM billing.wallets WHERE id IN (1, 2) ORDER BY id');
      expect(sum.rows).toEqual([{ balance: 100 }, { balance: 100 }]);
    } finally {
      await endAll(t1, t2, monitor);
    }
  });

  it('many concurrent opposite-order transfers with lockRows: no deadlock, money conserved', async () => {
    const clients = await Promise.all(Array.from({ length: 8 }, () => connect(url)));
    try {
      await Promise.all(
        clients.map(async (c, i) => {
          for (let n = 0; n < 15; n++) {
            const [from, to] = (i + n) % 2 === 0 ? [1, 2] : [2, 1];
            await c.query('BEGIN');
            const locked = await lockRows(c, { table: 'billing.wallets', ids: [from, to] });
            expect(locked.isOk()).toBe(true);
            await c.query('UPDATE billing.wallets SET balance = balance - 1 WHERE id = $1', [from]);
            await c.query('UPDATE billing.wallets SET balance = balance + 1 WHERE id = $1', [to]);
            await c.query('COMMIT');
          }
        }),
      );
      const sum = await pool.query('SELECT sum(balance)::int AS s FROM billing.wallets WHERE id IN (1, 2)');
      expect(sum.rows[0].s).toBe(200);
    } finally {
      await endAll(...clients);
    }
  });

  it("missing compares ids in the key column's type: an upper-case uuid or '01' for an int is the locked row", async () => {
    const c = await connect(url);
    try {
      await c.query('BEGIN');
      const cards = await lockRows(c, {
        table: 'billing.cards',
        ids: ['6F1C2A3B-4D5E-4F60-8A7B-9C0D1E2F3A4B', '00000000-0000-4000-8000-000000000000'],
      });
      expect(cards._unsafeUnwrap()).toEqual({
        rows: [{ id: '6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b', label: 'one' }],
        missing: ['00000000-0000-4000-8000-000000000000'],
      });
      const wallets = await lockRows<Wallet>(c, {
        table: 'billing.wallets',
        ids: ['01', ' 2', 3n, 99],
        columns: ['balance'],
      });
      expect(wallets._unsafeUnwrap()).toEqual({
        rows: [
          { id: 1, balance: 100 },
          { id: 2, balance: 100 },
          { id: 3, balance: 100 },
        ],
        missing: [99],
      });
      await c.query('COMMIT');
    } finally {
      await endAll(c);
    }
  });

  it('bad identifiers and ids → InvalidOptions before any SQL', async () => {
    const c = await connect(url);
    try {
      await c.query('BEGIN');
      for (const bad of [
        { table: 'wallets"; DROP TABLE x; --', ids: [1] },
        { table: 'a.b.c', ids: [1] },
        { table: 'billing.wallets', key: 'id desc', ids: [1] },
        { table: 'billing.wallets', ids: [] },
        { table: 'billing.wallets', ids: [Number.NaN] },
        { table: 'billing.wallets', ids: [1], mode: 'exclusive' },
        { table: 'billing.wallets', ids: [1], columns: ['balance, pg_sleep(1)'] },
        { table: 'billing.wallets', ids: ['1\u0000'] },
      ]) {
        const r = await lockRows(c, bad as never);
        expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
      }
      // the transaction is still usable: nothing reached the server
      await c.query('SELECT 1');
      await c.query('COMMIT');
    } finally {
      await endAll(c);
    }
  });
});
