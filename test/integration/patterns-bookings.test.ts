import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { advisoryKey, keyFromLockTag } from '../../src/advisory/advisory-key.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { connect, endAll, leftovers, pidOf, waitUntilBlocked } from './patterns-support.js';

const { pool, url } = await useTestDatabase();
await pool.query(`CREATE SCHEMA hotel;
  CREATE TABLE hotel.room_bookings (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL, guest text)`);
const rooms = new Bookings({ table: 'hotel.room_bookings', resource: 'room_id', during: 'during' });
const tm = new TxManager(pool);

const at = (h: number, m = 0) => new Date(Date.UTC(2030, 0, 1, h, m));

beforeEach(async () => {
  await pool.query('TRUNCATE hotel.room_bookings RESTART IDENTITY');
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

type Booking = { id: number; room_id: number; guest: string | null };

describe('Bookings', () => {
  it('migrate() adds the EXCLUDE constraint once (idempotent, concurrent-safe)', async () => {
    const results = await Promise.all([rooms.migrate(pool), rooms.migrate(pool), rooms.migrate(pool)]);
    expect(results.map((r) => r._unsafeUnwrap().created).filter(Boolean).length).toBeLessThanOrEqual(1);
    expect((await rooms.migrate(pool))._unsafeUnwrap().created).toBe(false);
    const c = await pool.query(
      "SELECT conname FROM pg_constraint WHERE conrelid = 'hotel.room_bookings'::regclass AND contype = 'x'",
    );
    expect(c.rows).toEqual([{ conname: 'room_bookings_no_overlap' }]);
    // an equivalent constraint under another name is recognised: no second constraint
    await pool.query(`CREATE TABLE hotel.desks (id serial PRIMARY KEY, desk int NOT NULL, during tstzrange NOT NULL,
      CONSTRAINT their_name EXCLUDE USING gist (desk WITH =, during WITH &&))`);
    const desks = new Bookings({ table: 'hotel.desks', resource: 'desk', during: 'during' });
    expect((await desks.migrate(pool))._unsafeUnwrap().created).toBe(false);
  });

  it('books, refuses an overlap with Overlap {conflicting, constraint}; half-open ranges touch without overlapping', async () => {
    const a = await rooms.book<Booking>(pool, {
      resource: 1,
      from: at(10),
      to: at(11),
      values: { guest: 'Ann' },
    });
    expect(a._unsafeUnwrap()).toMatchObject({ id: 1, room_id: 1, guest: 'Ann' });
    const b = await rooms.book(pool, { resource: 1, from: '2030-01-01T10:30:00Z', to: at(12) });
    const overlap = b._unsafeUnwrapErr();
    expect(overlap.kind).toBe('Overlap');
    if (overlap.kind !== 'Overlap') throw overlap;
    expect(overlap.constraint).toBe('room_bookings_no_overlap');
    expect(overlap.conflicting).toMatchObject([{ id: 1, guest: 'Ann' }]);
    // back to back: [11:00, 12:00) after [10:00, 11:00)
    expect((await rooms.book(pool, { resource: 1, from: at(11), to: at(12) })).isOk()).toBe(true);
    // another room is independent
    expect((await rooms.book(pool, { resource: 2, from: at(10), to: at(11) })).isOk()).toBe(true);
  });

  it('inside a transaction an Overlap leaves the transaction usable (savepoint)', async () => {
    await rooms.book(pool, { resource: 1, from: at(10), to: at(11) });
    const r = await tm.do(async (tx) => {
      await tx.query(
        "INSERT INTO hotel.room_bookings (room_id, during, guest) VALUES (9, tstzrange('2030-01-01', '2030-01-02'), 'kept')",
      );
      const refused = await rooms.book(tx, { resource: 1, from: at(10, 30), to: at(10, 45) });
      expect(refused._unsafeUnwrapErr().kind).toBe('Overlap');
      const ok = await rooms.book(tx, { resource: 1, from: at(12), to: at(13) });
      return ok._unsafeUnwrap();
    });
    expect(r.isOk()).toBe(true);
    expect((await pool.query('SELECT count(*)::int AS n FROM hotel.room_bookings')).rows[0].n).toBe(3);
  });

  it('a concurrent overlapping booking waits for the first, then gets Overlap (no serializable needed)', async () => {
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    const pid2 = await pidOf(t2);
    try {
      await t1.query('BEGIN');
      expect((await rooms.book(t1, { resource: 3, from: at(9), to: at(10) })).isOk()).toBe(true);
      await t2.query('BEGIN');
      const second = rooms.book(t2, { resource: 3, from: at(9, 30), to: at(10, 30) });
      await waitUntilBlocked(monitor, pid2);
      await t1.query('COMMIT');
      expect((await second)._unsafeUnwrapErr().kind).toBe('Overlap');
      await t2.query('COMMIT');
    } finally {
      await endAll(t1, t2, monitor);
    }
  });

  it('crossed bookings deadlock raw (40P01); with book() in tm.do they end as one winner + Overlap', async () => {
    // T1 books room 4 then room 5; T2 books room 5 then room 4, same slot: each waits on the other's
    // uncommitted row in the constraint check → 40P01.
    const [t1, t2, monitor] = [await connect(url), await connect(url), await connect(url)];
    const pid1 = await pidOf(t1);
    const insert = (c: typeof t1, room: number) =>
      c
        .query(
          "INSERT INTO hotel.room_bookings (room_id, during) VALUES ($1, tstzrange('2030-01-01 08:00Z', '2030-01-01 09:00Z'))",
          [room],
        )
        .then(
          () => 'ok',
          (e) => e.code as string,
        );
    try {
      await t1.query('BEGIN');
      await t2.query('BEGIN');
      expect(await insert(t1, 4)).toBe('ok');
      expect(await insert(t2, 5)).toBe('ok');
      const a = insert(t1, 5);
      await waitUntilBlocked(monitor, pid1);
      const outcomes = await Promise.all([a, insert(t2, 4)]);
      expect(outcomes.sort()).toEqual(['40P01', 'ok']);
      await t1.query('ROLLBACK');
      await t2.query('ROLLBACK');
    } finally {
      await endAll(t1, t2, monitor);
    }

    const g = gate();
    const crossed = (first: number, second: number) =>
      tm.do(async (tx) => {
        for (const [i, room] of [first, second].entries()) {
          const r = await rooms.book(tx, { resource: room, from: at(8), to: at(9) });
          if (r.isErr()) {
            if (r.error.kind === 'Overlap') return r; // the domain outcome: roll back, report
            throw r.error; // DeadlockDetected: tm.do retries the whole transaction
          }
          if (i === 0) await g.at('first-booked');
        }
        return tx.attempt;
      });
    const both = [crossed(4, 5), crossed(5, 4)];
    await g.reached('first-booked', 2);
    g.open('first-booked');
    const results = await Promise.all(both);
    expect(results.filter((r) => r.isOk())).toHaveLength(1);
    expect(results.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind)).toEqual(['Overlap']);
    const rows = await pool.query('SELECT room_id FROM hotel.room_bookings ORDER BY room_id');
    expect(rows.rows.map((r) => r.room_id)).toEqual([4, 5]);
  });

  it('many concurrent overlapping book() calls through tm.do: exactly one booking, Overlap for the rest', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        tm.do(async (tx) => {
          const r = await rooms.book(tx, { resource: 6, from: at(10, i), to: at(11, i) });
          if (r.isErr()) {
            if (r.error.kind === 'Overlap') return r; // domain outcome
            throw r.error; // retryable database failure: let tm.do retry
          }
          return r.value;
        }),
      ),
    );
    expect(results.filter((r) => r.isOk())).toHaveLength(1);
    expect(results.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind)).toEqual(
      Array(11).fill('Overlap'),
    );
  });

  it("book() and move() hold the resource's advisory key (= advisoryKey) until the transaction ends", async () => {
    const booked = (await rooms.book<Booking>(pool, { resource: 7, from: at(8), to: at(9) }))._unsafeUnwrap();
    const expected = advisoryKey('pg-txkit.bookings', 'hotel.room_bookings:7');
    const held = await tm.doOrThrow(async (tx) => {
      (await rooms.move(tx, booked.id, { from: at(9), to: at(10) }))._unsafeUnwrap();
      (await rooms.book(tx, { resource: 7, from: at(11), to: at(12) }))._unsafeUnwrap();
      const { rows } = await tx.query<{ classid: number; objid: number; objsubid: number }>(
        `SELECT classid::int8 AS classid, objid::int8 AS objid, objsubid FROM pg_locks
          WHERE locktype = 'advisory' AND pid = pg_backend_pid()`,
      );
      return rows.map((r) => keyFromLockTag(Number(r.classid), Number(r.objid), r.objsubid));
    });
    expect(held).toEqual([expected]);
    const after = await pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'");
    expect(after.rows[0]).toEqual({ n: 0 });
  });

  it('cancel() and move(): NotFound, atomic move, Overlap on collision (own old period ignored)', async () => {
    const a = (await rooms.book<Booking>(pool, { resource: 1, from: at(10), to: at(11) }))._unsafeUnwrap();
    const b = (await rooms.book<Booking>(pool, { resource: 1, from: at(12), to: at(13) }))._unsafeUnwrap();
    // overlapping its own old period is fine
    expect((await rooms.move(pool, a.id, { from: at(10, 30), to: at(11, 30) })).isOk()).toBe(true);
    const clash = (await rooms.move(pool, a.id, { from: at(12, 30), to: at(13, 30) }))._unsafeUnwrapErr();
    expect(clash.kind).toBe('Overlap');
    if (clash.kind === 'Overlap') expect(clash.conflicting.map((r) => r.id)).toEqual([b.id]);
    expect((await rooms.move(pool, 999, { from: at(1), to: at(2) }))._unsafeUnwrapErr().kind).toBe(
      'NotFound',
    );
    expect((await rooms.cancel<Booking>(pool, b.id))._unsafeUnwrap().id).toBe(b.id);
    expect((await rooms.cancel(pool, b.id))._unsafeUnwrapErr().kind).toBe('NotFound');
    expect((await rooms.move(pool, a.id, { from: at(12, 30), to: at(13, 30) })).isOk()).toBe(true);
  });

  it('a 63-character table name: migrate() derives a constraint name that fits (hash suffix) and books', async () => {
    const long = `r${'x'.repeat(62)}`;
    expect(long).toHaveLength(63);
    await pool.query(
      `CREATE TABLE hotel.${long} (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL)`,
    );
    const b = new Bookings({ table: `hotel.${long}`, resource: 'room', during: 'during' });
    expect(Buffer.byteLength(b.constraint)).toBeLessThanOrEqual(63);
    expect(b.constraint).not.toBe(long);
    expect((await b.migrate(pool))._unsafeUnwrap().created).toBe(true);
    expect((await b.migrate(pool))._unsafeUnwrap().created).toBe(false);
    expect((await b.book(pool, { resource: 1, from: at(9), to: at(10) })).isOk()).toBe(true);
    const again = await b.book(pool, { resource: 1, from: at(9, 30), to: at(11) });
    expect(again._unsafeUnwrapErr()).toMatchObject({ kind: 'Overlap', constraint: b.constraint });
  });

  it('a 23P01 from ANOTHER exclusion constraint of the table is an ExclusionViolation naming it, not Overlap', async () => {
    await pool.query(`ALTER TABLE hotel.room_bookings ADD CONSTRAINT guest_in_one_room
      EXCLUDE USING gist (guest WITH =, during WITH &&)`);
    try {
      (
        await rooms.book(pool, { resource: 1, from: at(9), to: at(10), values: { guest: 'Ann' } })
      )._unsafeUnwrap();
      // Another room, same guest, overlapping time: our constraint is fine, the guest's is not.
      const other = await rooms.book(pool, {
        resource: 2,
        from: at(9),
        to: at(10),
        values: { guest: 'Ann' },
      });
      expect(other._unsafeUnwrapErr()).toMatchObject({
        kind: 'ExclusionViolation',
        constraint: 'guest_in_one_room',
      });
      // Inside a transaction as well, and the transaction stays usable.
      const inTx = await tm.do(async (tx) => {
        const r = await rooms.book(tx, { resource: 3, from: at(9), to: at(10), values: { guest: 'Ann' } });
        await tx.query('SELECT 1');
        return r;
      });
      expect(inTx._unsafeUnwrapErr()).toMatchObject({
        kind: 'ExclusionViolation',
        constraint: 'guest_in_one_room',
      });
      // Our own constraint still means Overlap.
      const same = await rooms.book(pool, { resource: 1, from: at(9), to: at(10), values: { guest: 'Bob' } });
      expect(same._unsafeUnwrapErr().kind).toBe('Overlap');
    } finally {
      await pool.query('ALTER TABLE hotel.room_bookings DROP CONSTRAINT guest_in_one_room');
    }
  });

  it('bad ranges and options → InvalidOptions before any SQL', async () => {
    const bad = [
      { resource: 1, from: at(11), to: at(10) },
      { resource: 1, from: at(10), to: at(10) },
      { resource: 1, from: new Date(Number.NaN), to: at(10) },
      { resource: 1, from: 'tomorrow', to: at(10) },
      { resource: 1, from: at(9), to: at(10), values: { 'guest) VALUES (1); --': 'x' } },
    ];
    for (const input of bad) {
      expect((await rooms.book(pool, input as never))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    }
    expect((await rooms.move(pool, 1, { from: at(2), to: at(1) }))._unsafeUnwrapErr().kind).toBe(
      'InvalidOptions',
    );
    expect(() => new Bookings({ table: 'x; drop', resource: 'r', during: 'd' })).toThrow(/invalid options/);
    expect((await pool.query('SELECT count(*)::int AS n FROM hotel.room_bookings')).rows[0].n).toBe(0);
  });
});
