import pg from 'pg';
import oldestPg from 'pg-oldest';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { type FlightOutcome, sendFlight } from '../../src/tx/send-flight.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Queryable } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import { leftovers } from './patterns-support.js';

// The patterns send their own statements around the caller's (SAVEPOINT, the INSERT, RELEASE; an
// advisory lock, then the INSERT it guards) in one flight: messages up to ONE Sync. These tests check
// that the caller sees exactly what it saw when each went in a round trip of its own, and count the
// round trips (ReadyForQuery messages: one per Sync) to show what is saved.
const { pool, url } = await useTestDatabase();
await pool.query(`CREATE TABLE rb (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL, guest text);
  CREATE TABLE kept (note text NOT NULL)`);
const rooms = new Bookings({ table: 'rb', resource: 'room', during: 'during' });
(await rooms.migrate(pool))._unsafeUnwrap();
const proxy = await FaultProxy.start({ target: url });

const at = (h: number) => new Date(Date.UTC(2030, 0, 1, h));
const slot = (room: number, from: number, to: number, guest = 'g') => ({
  resource: room,
  from: at(from),
  to: at(to),
  values: { guest },
});

beforeEach(async () => {
  await pool.query('TRUNCATE rb, kept RESTART IDENTITY');
});
afterEach(() => proxy.resume());
afterAll(async () => {
  await proxy.close();
  expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 });
});

const table = async () =>
  (await pool.query<{ room: number; guest: string }>('SELECT room, guest FROM rb ORDER BY id')).rows;
const keptNotes = async () =>
  (await pool.query<{ note: string }>('SELECT note FROM kept ORDER BY note')).rows.map((r) => r.note);

/**
 * A one-connection pool of `driver` whose round trips are counted: every ReadyForQuery the server
 * sends ends one unit of messages (one Sync, or one simple query), so it is one round trip.
 */
function countedPool(driver: typeof pg, options: pg.PoolConfig = {}) {
  const own = new driver.Pool({ connectionString: url, max: 1, ...options });
  const trips = { n: 0 };
  own.on('connect', (client) => {
    (client as unknown as { connection: pg.Connection }).connection.on('readyForQuery', () => {
      trips.n++;
    });
  });
  return { own, trips };
}

/** A queryable of the user's own around a client: the patterns cannot write a flight on it. */
const oneByOne = (client: pg.PoolClient): Queryable => ({
  query: ((...args: unknown[]) => (client.query as (...a: unknown[]) => unknown)(...args)) as never,
  ...(typeof client.getTransactionStatus === 'function'
    ? { getTransactionStatus: () => client.getTransactionStatus() }
    : {}),
});

describe.each([
  ['pg (current)', pg],
  ['pg 8.11 (the oldest supported)', oldestPg as unknown as typeof pg],
])('%s', (_name, driver) => {
  it('book() inside a transaction: one round trip where SAVEPOINT, INSERT and RELEASE took three (three for an Overlap, five before)', async () => {
    const { own, trips } = countedPool(driver);
    try {
      const client = await own.connect();
      try {
        // pg 8.11 keeps no transaction status: book() asks the server once whether it is in one.
        const statusCheck = typeof client.getTransactionStatus === 'function' ? 0 : 1;
        await client.query('BEGIN');
        trips.n = 0;
        expect((await rooms.book(client, slot(1, 10, 11, 'flown'))).isOk()).toBe(true);
        expect(trips.n).toBe(statusCheck + 1);
        trips.n = 0;
        expect((await rooms.book(oneByOne(client), slot(2, 10, 11, 'one by one'))).isOk()).toBe(true);
        expect(trips.n).toBe(statusCheck + 3);
        // Refused (Overlap): the flight, ROLLBACK TO + RELEASE in one, the read of the bookings in the
        // way — three round trips where one by one takes five.
        trips.n = 0;
        expect((await rooms.book(client, slot(1, 10, 11)))._unsafeUnwrapErr().kind).toBe('Overlap');
        expect(trips.n).toBe(statusCheck + 3);
        trips.n = 0;
        expect((await rooms.book(oneByOne(client), slot(1, 10, 11)))._unsafeUnwrapErr().kind).toBe('Overlap');
        expect(trips.n).toBe(statusCheck + 5);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      // Through tm.do: one round trip for book() after a first statement; as the first statement,
      // BEGIN goes with it, and the whole transaction is two round trips (the flight, COMMIT).
      const tm = new TxManager(own);
      let booking = -1;
      await tm.doOrThrow(async (tx) => {
        await tx.query("INSERT INTO kept VALUES ('first')");
        const before = trips.n;
        (await rooms.book(tx, slot(3, 10, 11)))._unsafeUnwrap();
        booking = trips.n - before;
      });
      expect(booking).toBe(1);
      trips.n = 0;
      await tm.doOrThrow(async (tx) => (await rooms.book(tx, slot(4, 10, 11)))._unsafeUnwrap(), {
        lockTimeout: 1000,
      });
      expect(trips.n).toBe(2);
      expect((await table()).map((r) => r.room)).toEqual([1, 2, 3, 4]);
    } finally {
      await own.end();
    }
  });

  it('a booking refused by the EXCLUDE constraint inside a transaction: Overlap, the earlier work kept', async () => {
    (await rooms.book(pool, slot(1, 10, 12, 'first')))._unsafeUnwrap();
    const { own } = countedPool(driver);
    try {
      const tm = new TxManager(own);
      // As the transaction's first statement (BEGIN, SAVEPOINT, INSERT in one flight; the INSERT fails).
      const first = await tm.do(async (tx) => {
        const refused = await rooms.book(tx, slot(1, 11, 13, 'refused'));
        await tx.query("INSERT INTO kept VALUES ('after a refused first booking')");
        return refused.isErr() ? refused.error : undefined; // the error as a value: the transaction commits
      });
      const overlap = first._unsafeUnwrap();
      expect(overlap?.kind).toBe('Overlap');
      expect(overlap?.kind === 'Overlap' && overlap.conflicting).toMatchObject([{ room: 1, guest: 'first' }]);
      // After earlier work, then a booking that succeeds in the same transaction.
      const later = await tm.doOrThrow(async (tx) => {
        await tx.query("INSERT INTO kept VALUES ('before a refused booking')");
        const refused = await rooms.book(tx, slot(1, 9, 11, 'refused'));
        const booked = await rooms.book(tx, slot(1, 12, 13, 'booked'));
        return [refused.isErr() && refused.error.kind, booked.isOk()];
      });
      expect(later).toEqual(['Overlap', true]);
      // On a client the caller put in a transaction by hand.
      const client = await own.connect();
      try {
        await client.query('BEGIN');
        await client.query("INSERT INTO kept VALUES ('by hand')");
        const refused = await rooms.book(client, slot(1, 10, 11, 'refused'));
        expect(refused._unsafeUnwrapErr().kind).toBe('Overlap');
        expect((await client.query('SELECT 1 AS usable')).rows).toEqual([{ usable: 1 }]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      expect(await keptNotes()).toEqual([
        'after a refused first booking',
        'before a refused booking',
        'by hand',
      ]);
      expect(await table()).toEqual([
        { room: 1, guest: 'first' },
        { room: 1, guest: 'booked' },
      ]);
    } finally {
      await own.end();
    }
  });

  it('a SAVEPOINT refused (an aborted transaction): the INSERT never runs; the same error as one by one', async () => {
    const { own } = countedPool(driver);
    try {
      const client = await own.connect();
      try {
        const outcomes: unknown[] = [];
        for (const db of [client, oneByOne(client)]) {
          await client.query('BEGIN');
          await client.query('SELECT 1 / 0').catch(() => {});
          const refused = await rooms.book(db, slot(1, 10, 11, 'in an aborted transaction'));
          const error = refused._unsafeUnwrapErr();
          outcomes.push([error.kind, (error as { code?: string }).code]);
          await client.query('ROLLBACK');
        }
        expect(outcomes[0]).toEqual(outcomes[1]);
      } finally {
        client.release();
      }
      const tm = new TxManager(own);
      const seen: unknown[] = [];
      for (const wrap of [false, true]) {
        const result = await tm.do(async (tx) => {
          await tx.query("INSERT INTO kept VALUES ('rolled back')");
          await tx.query('SELECT 1 / 0').catch(() => {});
          const refused = (
            await rooms.book(wrap ? { query: tx.query.bind(tx) } : tx, slot(1, 10, 11))
          )._unsafeUnwrapErr();
          seen.push([refused.kind, (refused as { code?: string }).code]);
        });
        seen.push((result._unsafeUnwrapErr() as { code?: string }).code);
      }
      // The transaction shows the error that aborted it (22012), with or without the flight.
      expect(seen).toEqual([['DbError', '22012'], '22012', ['DbError', '22012'], '22012']);
      expect(await table()).toEqual([]);
      expect(await keptNotes()).toEqual([]);
    } finally {
      await own.end();
    }
  });
});

describe('inside a nested scope (propagation nested)', () => {
  it("book() in the scope's own savepoint: an Overlap is rolled back to book()'s savepoint, the scope and the transaction go on", async () => {
    (await rooms.book(pool, slot(1, 10, 12, 'first')))._unsafeUnwrap();
    const tm = new TxManager(pool);
    const out = await tm.doOrThrow(async (tx) => {
      await tx.query("INSERT INTO kept VALUES ('outer')");
      return tm.doOrThrow(
        async (inner) => {
          await inner.query("INSERT INTO kept VALUES ('inner')");
          const refused = await rooms.book(inner, slot(1, 11, 13, 'refused'));
          const booked = await rooms.book(inner, slot(1, 12, 13, 'booked'));
          return [refused.isErr() && refused.error.kind, booked.isOk()];
        },
        { propagation: 'nested' },
      );
    });
    expect(out).toEqual(['Overlap', true]);
    expect(await keptNotes()).toEqual(['inner', 'outer']);
    expect((await table()).map((r) => r.guest)).toEqual(['first', 'booked']);
  });
});

/** Where a flight failed and the SQLSTATE it failed with (undefined when it succeeded). */
const partAndCode = (sent: FlightOutcome) =>
  sent.ok ? undefined : [sent.part, (sent.error as { code?: string }).code];

describe('sendFlight on its own: which part failed, and what ran', () => {
  it('a refused opening statement: the statement behind it never runs, not even in autocommit', async () => {
    const client = await pool.connect();
    try {
      // Outside a transaction block SAVEPOINT is refused (25P01); the INSERT behind it is discarded.
      const sent = await sendFlight(client, {
        opening: ['SAVEPOINT s'],
        text: 'INSERT INTO kept VALUES ($1)',
        values: ['behind a refused SAVEPOINT'],
        closing: ['RELEASE SAVEPOINT s'],
      });
      expect(partAndCode(sent)).toEqual(['opening', '25P01']);
      // No transaction block was left open (pg 8.11's client has no getTransactionStatus): outside one,
      // each statement is its own transaction, so now() is this statement's start.
      const idle = await client.query<{ idle: boolean }>('SELECT now() = statement_timestamp() AS idle');
      expect(idle.rows[0]?.idle).toBe(true);
    } finally {
      client.release();
    }
    expect(await keptNotes()).toEqual([]);
  });

  it('a failing statement: the closing statements behind it never run; a failing closing one is told apart', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const failed = await sendFlight(client, {
        opening: ['SAVEPOINT s'],
        text: 'SELECT 1 / $1::int',
        values: [0],
        closing: ['RELEASE SAVEPOINT s'],
      });
      expect(partAndCode(failed)).toEqual(['statement', '22012']);
      // RELEASE was discarded: the savepoint is still there to roll back to.
      await client.query('ROLLBACK TO SAVEPOINT s');
      const closing = await sendFlight<{ n: number }>(client, {
        opening: [{ text: 'SELECT $1::int', values: [7] }],
        text: 'SELECT $1::int AS n',
        values: [1],
        closing: ['RELEASE SAVEPOINT no_such_savepoint'],
      });
      expect(partAndCode(closing)).toEqual(['closing', '3B001']);
      await client.query('ROLLBACK');
      // The opening statement's row is not the result's: only the statement's own.
      const ok = await sendFlight<{ n: number }>(client, {
        opening: [{ text: 'SELECT $1::int AS lock', values: [7] }, 'SELECT 2'],
        text: 'SELECT $1::int AS n',
        values: [1],
        closing: ['SELECT 3'],
      });
      expect(ok.ok && [ok.result.rows, ok.result.fields.map((f) => f.name), ok.result.command]).toEqual([
        [{ n: 1 }],
        ['n'],
        'SELECT',
      ]);
    } finally {
      client.release();
    }
  });
});

describe('a connection cut while the flight is in the air', () => {
  it('book() in tm.do: ConnectionLost, retried from a fresh BEGIN, every row written once', async () => {
    const proxied = new pg.Pool({ connectionString: proxy.url, max: 1 });
    proxied.on('error', () => {});
    try {
      const tm = new TxManager(proxied, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
      const seen: string[] = [];
      const result = await tm.do(async (tx) => {
        await tx.query('INSERT INTO kept VALUES ($1)', [`attempt ${tx.attempt}`]);
        if (tx.attempt === 1) {
          proxy.stall(); // the flight is held by the network …
          const pending = rooms.book(tx, slot(1, 10, 11, 'cut'));
          await new Promise<void>((resolve) => setImmediate(resolve));
          proxy.dropAll(); // … and the connection cut before the server saw any of it
          proxy.resume();
          const cut = await pending;
          seen.push(cut.isErr() ? cut.error.kind : 'booked');
          if (cut.isErr()) throw cut.error;
        }
        return (await rooms.book(tx, slot(1, 10, 11, 'retried')))._unsafeUnwrap();
      });
      expect(result.isOk()).toBe(true);
      expect(seen).toEqual(['ConnectionLost']);
      expect(await table()).toEqual([{ room: 1, guest: 'retried' }]);
      expect(await keptNotes()).toEqual(['attempt 2']);
    } finally {
      await proxied.end();
    }
  });
});

describe('IdempotencyKeys.run: the advisory lock and the key INSERT in one flight', () => {
  it('a first run takes one round trip less; a lock that cannot be had never runs the INSERT', async () => {
    const { own, trips } = countedPool(pg);
    const monitor = new pg.Client({ connectionString: url });
    await monitor.connect();
    try {
      const tm = new TxManager(own);
      const keys = new IdempotencyKeys(tm, { table: 'flight_keys' });
      (await keys.migrate())._unsafeUnwrap();
      trips.n = 0;
      const first = await keys.run('k1', () => 'done');
      expect(first._unsafeUnwrap()).toEqual({ result: 'done', replayed: false });
      // BEGIN + lock + INSERT, the result's UPDATE, COMMIT (the lock had a round trip of its own).
      expect(trips.n).toBe(3);
      // Another session holds the key's lock: with lock_timeout, the lock is refused and the INSERT
      // behind it never runs (no key row, fn not called).
      const lockKey = advisoryKey('pg-txkit', 'idempotency:key:flight_keys:k2').toString();
      await monitor.query('BEGIN');
      await monitor.query('SELECT pg_advisory_xact_lock($1::bigint)', [lockKey]);
      let called = false;
      const waiting = await tm.do(
        () =>
          keys.run('k2', () => {
            called = true;
            return 'ran';
          }),
        { lockTimeout: 50, maxAttempts: 1 },
      );
      const refused = waiting._unsafeUnwrapErr();
      expect(refused.kind === 'RetriesExhausted' ? refused.last.kind : refused.kind).toBe('LockNotAvailable');
      expect(called).toBe(false);
      await monitor.query('ROLLBACK');
      expect((await pool.query('SELECT key FROM flight_keys ORDER BY key')).rows).toEqual([{ key: 'k1' }]);
      expect((await keys.run('k1', () => 'again'))._unsafeUnwrap()).toEqual({
        result: 'done',
        replayed: true,
      });
    } finally {
      await monitor.end();
      await own.end();
    }
  });
});

describe('withAdvisoryLock with lockTimeout: the bounded timeout and the lock in one flight', () => {
  it('one round trip less; a lock held elsewhere is still LockNotAvailable, fn keeps its own lock_timeout', async () => {
    const { own, trips } = countedPool(pg);
    const monitor = new pg.Client({ connectionString: url });
    await monitor.connect();
    try {
      const tm = new TxManager(own);
      trips.n = 0;
      const seen = await withAdvisoryLock(
        tm,
        advisoryKey('flight', 'a'),
        async (tx) =>
          (await tx.query<{ t: string }>("SELECT current_setting('lock_timeout') AS t")).rows[0]?.t,
        { lockTimeout: 150, tx: { lockTimeout: '3s' } },
      );
      expect(seen._unsafeUnwrap()).toBe('3s');
      // BEGIN + SET LOCAL + the bounded timeout + the lock; the restore; the callback's read; COMMIT (was 5).
      expect(trips.n).toBe(4);
      await monitor.query('BEGIN');
      await monitor.query('SELECT pg_advisory_xact_lock($1::bigint)', [
        advisoryKey('flight', 'b').toString(),
      ]);
      let called = false;
      const refused = await withAdvisoryLock(
        tm,
        advisoryKey('flight', 'b'),
        () => {
          called = true;
        },
        { lockTimeout: 50 },
      );
      expect(refused._unsafeUnwrapErr().kind).toBe('LockNotAvailable');
      expect(called).toBe(false);
      await monitor.query('ROLLBACK');
    } finally {
      await monitor.end();
      await own.end();
    }
  });
});

describe("on a pool with pg's own pipelining (pipeline: true)", () => {
  it('book() and IdempotencyKeys.run give the same results', async () => {
    (await rooms.book(pool, slot(1, 10, 12, 'first')))._unsafeUnwrap();
    const piped = new pg.Pool({ connectionString: url, max: 1, pipeline: true } as pg.PoolConfig);
    try {
      const tm = new TxManager(piped);
      const out = await tm.doOrThrow(async (tx) => {
        const refused = await rooms.book(tx, slot(1, 11, 13, 'refused'));
        const booked = await rooms.book(tx, slot(2, 11, 13, 'booked'));
        return [refused.isErr() && refused.error.kind, booked.isOk()];
      });
      expect(out).toEqual(['Overlap', true]);
      const keys = new IdempotencyKeys(tm, { table: 'piped_keys' });
      (await keys.migrate())._unsafeUnwrap();
      expect((await keys.run('p', () => 1))._unsafeUnwrap()).toEqual({ result: 1, replayed: false });
      expect((await keys.run('p', () => 2))._unsafeUnwrap()).toEqual({ result: 1, replayed: true });
      expect(await table()).toEqual([
        { room: 1, guest: 'first' },
        { room: 2, guest: 'booked' },
      ]);
    } finally {
      await piped.end();
    }
  });
});
