import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { upsert } from '../../src/patterns/upsert.js';
import { useTestDatabase } from '../helpers.js';
import { connect, endAll, leftovers, pidOf, waitUntilBlocked } from './patterns-support.js';

const { pool, url } = await useTestDatabase();
await pool.query(`CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL CONSTRAINT users_email_key UNIQUE, name text);
  CREATE TABLE counters (tenant int, name text, n int NOT NULL, PRIMARY KEY (tenant, name));
  CREATE TABLE shifts (id serial PRIMARY KEY, nurse int NOT NULL, during int4range NOT NULL,
    CONSTRAINT shifts_no_overlap EXCLUDE USING gist (nurse WITH =, during WITH &&));
  CREATE TABLE invites (id serial PRIMARY KEY, tenant int NOT NULL DEFAULT 1, email text NOT NULL,
    CONSTRAINT invites_tenant_email_key UNIQUE (tenant, email))`);

beforeEach(async () => {
  await pool.query('TRUNCATE users, counters, shifts, invites RESTART IDENTITY');
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

type User = { id: number; email: string; name: string | null };

describe('insertOnce', () => {
  it('creates the row once, then returns the existing one (columns or constraint as the conflict target)', async () => {
    const first = await insertOnce<User>(pool, {
      table: 'users',
      values: { email: 'a@x', name: 'Ann' },
      conflict: ['email'],
    });
    expect(first._unsafeUnwrap()).toEqual({ row: { id: 1, email: 'a@x', name: 'Ann' }, created: true });
    const again = await insertOnce<User>(pool, {
      table: 'users',
      values: { email: 'a@x', name: 'Other' },
      conflict: { constraint: 'users_email_key' },
    });
    expect(again._unsafeUnwrap()).toEqual({ row: { id: 1, email: 'a@x', name: 'Ann' }, created: false });
    const ret = await insertOnce(pool, {
      table: 'users',
      values: { email: 'a@x' },
      conflict: ['email'],
      returning: ['id'],
    });
    expect(ret._unsafeUnwrap()).toEqual({ row: { id: 1 }, created: false });
  });

  it('many concurrent racers: exactly one created, all get the same row', async () => {
    const clients = await Promise.all(Array.from({ length: 10 }, () => connect(url)));
    try {
      const results = await Promise.all(
        clients.map((c, i) =>
          insertOnce<User>(c, {
            table: 'users',
            values: { email: 'race@x', name: `n${i}` },
            conflict: ['email'],
          }),
        ),
      );
      const values = results.map((r) => r._unsafeUnwrap());
      expect(values.filter((v) => v.created)).toHaveLength(1);
      expect(new Set(values.map((v) => v.row.id)).size).toBe(1);
      expect((await pool.query('SELECT count(*)::int AS n FROM users')).rows[0].n).toBe(1);
    } finally {
      await endAll(...clients);
    }
  });

  it('waits for an uncommitted inserter: its rollback → we create; its commit → we read its row', async () => {
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    const pid2 = await pidOf(t2);
    try {
      for (const outcome of ['ROLLBACK', 'COMMIT'] as const) {
        await t1.query('BEGIN');
        await t1.query("INSERT INTO users (email, name) VALUES ('w@x', 't1')");
        const racer = insertOnce<User>(t2, {
          table: 'users',
          values: { email: 'w@x', name: 't2' },
          conflict: ['email'],
        });
        await waitUntilBlocked(monitor, pid2);
        await t1.query(outcome);
        const r = (await racer)._unsafeUnwrap();
        expect(r.created).toBe(outcome === 'ROLLBACK');
        expect(r.row.name).toBe(outcome === 'ROLLBACK' ? 't2' : 't1');
        if (outcome === 'ROLLBACK') await pool.query('DELETE FROM users');
      }
    } finally {
      await endAll(t1, t2, monitor);
    }
  });

  it('a conflicting row deleted before our read: the insert is tried again and creates', async () => {
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    const pid2 = await pidOf(t2);
    try {
      await pool.query("INSERT INTO users (email, name) VALUES ('d@x', 'old')");
      // t1 deletes the row and re-inserts it in one transaction; t2 waits on the new uncommitted key.
      await t1.query('BEGIN');
      await t1.query("DELETE FROM users WHERE email = 'd@x'");
      await t1.query("INSERT INTO users (email, name) VALUES ('d@x', 'mid')");
      const racer = insertOnce<User>(t2, {
        table: 'users',
        values: { email: 'd@x', name: 'new' },
        conflict: ['email'],
      });
      await waitUntilBlocked(monitor, pid2);
      await t1.query('COMMIT');
      const r = (await racer)._unsafeUnwrap();
      expect(r.row.name).toBe('mid');
      expect(r.created).toBe(false);
    } finally {
      await endAll(t1, t2, monitor);
    }
  });

  it('at repeatable read, a committed conflicting row our snapshot cannot see → SerializationFailure', async () => {
    const c = await connect(url);
    try {
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await c.query('SELECT 1 FROM users LIMIT 1');
      await pool.query("INSERT INTO users (email) VALUES ('rr@x')");
      const r = await insertOnce(c, { table: 'users', values: { email: 'rr@x' }, conflict: ['email'] });
      expect(r._unsafeUnwrapErr().kind).toBe('SerializationFailure');
      await c.query('ROLLBACK');
    } finally {
      await endAll(c);
    }
  });

  it('{ constraint } naming an exclusion constraint → InvalidOptions up front, before anything is inserted', async () => {
    const options = {
      table: 'shifts',
      values: { nurse: 1, during: '[1,5)' },
      conflict: { constraint: 'shifts_no_overlap' },
    };
    const first = await insertOnce(pool, options);
    expect(first._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect((await pool.query('SELECT count(*)::int AS n FROM shifts')).rows[0].n).toBe(0);
    // And on a real duplicate (the case that used to reject with a plain Error): still a typed error.
    await pool.query("INSERT INTO shifts (nurse, during) VALUES (1, '[1,5)')");
    const dup = await insertOnce(pool, options);
    expect(dup._unsafeUnwrapErr().kind).toBe('InvalidOptions');
  });

  it('{ constraint } with a key column left to its DEFAULT → InvalidOptions up front (the row could not be found)', async () => {
    const options = {
      table: 'invites',
      values: { email: 'a@x' },
      conflict: { constraint: 'invites_tenant_email_key' },
    };
    const first = await insertOnce(pool, options);
    expect(first._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect((await pool.query('SELECT count(*)::int AS n FROM invites')).rows[0].n).toBe(0);
    await pool.query("INSERT INTO invites (email) VALUES ('a@x')");
    expect((await insertOnce(pool, options))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    // With every key column given it works, and finds the row made with the default.
    const full = await insertOnce(pool, { ...options, values: { tenant: 1, email: 'a@x' } });
    expect(full._unsafeUnwrap()).toMatchObject({ created: false, row: { tenant: 1, email: 'a@x' } });
  });

  it('bad input → InvalidOptions before SQL (also conflict columns missing from values)', async () => {
    for (const bad of [
      { table: 'users', values: {}, conflict: ['email'] },
      { table: 'users', values: { 'email) VALUES (1); --': 1 }, conflict: ['email'] },
      { table: 'users', values: { email: 'x' }, conflict: [] },
      { table: 'users', values: { email: 'x' }, conflict: { constraint: 'a b' } },
      { table: '1users', values: { email: 'x' }, conflict: ['email'] },
      { table: 'users', values: { name: 'x' }, conflict: ['email'] },
    ]) {
      expect((await insertOnce(pool, bad as never))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    }
    const notNull = await insertOnce(pool, {
      table: 'users',
      values: { id: 1, email: null },
      conflict: ['email'],
    });
    expect(notNull._unsafeUnwrapErr().kind).toBe('NotNullViolation');
  });
});

describe('upsert', () => {
  it('inserts (created: true), then updates (created: false) by the composite key', async () => {
    const base = { table: 'counters', conflict: ['tenant', 'name'] };
    const a = await upsert(pool, { ...base, values: { tenant: 1, name: 'visits', n: 1 } });
    expect(a._unsafeUnwrap()).toEqual({ row: { tenant: 1, name: 'visits', n: 1 }, created: true });
    const b = await upsert(pool, { ...base, values: { tenant: 1, name: 'visits', n: 5 }, update: ['n'] });
    expect(b._unsafeUnwrap()).toEqual({ row: { tenant: 1, name: 'visits', n: 5 }, created: false });
    const c = await upsert(pool, {
      ...base,
      values: { tenant: 1, name: 'visits', n: 9 },
      update: { n: 0 },
      returning: ['n'],
    });
    expect(c._unsafeUnwrap()).toEqual({ row: { n: 0 }, created: false });
    const d = await upsert(pool, {
      table: 'counters',
      values: { tenant: 1, name: 'visits', n: 7 },
      conflict: { constraint: 'counters_pkey' },
    });
    expect(d._unsafeUnwrap().row).toEqual({ tenant: 1, name: 'visits', n: 7 });
  });

  it('concurrent upserts of one key: one insert, the rest updates', async () => {
    const clients = await Promise.all(Array.from({ length: 8 }, () => connect(url)));
    try {
      const results = await Promise.all(
        clients.map((c, i) =>
          upsert(c, {
            table: 'counters',
            values: { tenant: 2, name: 'k', n: i },
            conflict: ['tenant', 'name'],
          }),
        ),
      );
      expect(results.filter((r) => r._unsafeUnwrap().created)).toHaveLength(1);
    } finally {
      await endAll(...clients);
    }
  });

  it('bad input → InvalidOptions', async () => {
    const r = await upsert(pool, {
      table: 'counters',
      values: { n: 1 },
      conflict: ['name'],
      update: [],
    } as never);
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
  });
});
