import fc from 'fast-check';
import { err, ok } from 'neverthrow';
import { afterAll, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { updateWhere } from '../../src/patterns/update-where.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Tx } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';

// Concurrency properties on a real PostgreSQL: random operation mixes run by concurrent sessions, a
// checker query states the invariant. Each property has a NAIVE CONTROL (read in the app, check, write)
// that the same property must catch: the naive sessions meet at a gate between read and write, so the
// race is certain, and the test asserts that fast-check finds the counterexample.
const { pool } = await useTestDatabase();
const tm = new TxManager(pool, { defaults: { maxAttempts: 30, backoff: { baseMs: 1, capMs: 20 } } });
await pool.query(`
  CREATE TABLE stock (sku text PRIMARY KEY, left_units int NOT NULL);
  CREATE TABLE orders (id serial PRIMARY KEY, qty int NOT NULL);
  CREATE TABLE bookings (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL);
  CREATE TABLE naive_bookings (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL);
  CREATE TABLE payments (id serial PRIMARY KEY, request text NOT NULL);
  CREATE TABLE naive_requests (key text NOT NULL, payment_id int NOT NULL);
  CREATE TABLE doctors (id int PRIMARY KEY, on_call boolean NOT NULL)`);
const rooms = new Bookings({ table: 'bookings', resource: 'room_id', during: 'during' });
(await rooms.migrate(pool))._unsafeUnwrap();
const keys = new IdempotencyKeys(tm, { table: 'request_keys' });
(await keys.migrate())._unsafeUnwrap();
afterAll(async () => {
  const idle = await pool.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
  );
  expect(idle.rows[0].n).toBe(0);
});

const RUNS = { numRuns: 6 };
const one = async (sql: string) => (await pool.query(sql)).rows[0] as Record<string, number>;

/** Runs every session at once; naive sessions wait at `read` until all have read. */
async function concurrently<T>(
  n: number,
  naive: boolean,
  session: (i: number, afterRead: () => Promise<void>) => Promise<T>,
) {
  const g = gate();
  const all = Array.from({ length: n }, (_, i) =>
    session(i, () => (naive ? g.at('read') : Promise.resolve())),
  );
  if (naive) {
    await g.reached('read', n);
    g.open('read');
  }
  return Promise.all(all);
}

// ---- no oversell ---------------------------------------------------------------------------------
const demand = fc.integer({ min: 1, max: 6 }).chain((stock) =>
  fc.record({
    stock: fc.constant(stock),
    orders: fc.array(fc.integer({ min: 1, max: stock }), { minLength: stock + 1, maxLength: 10 }),
  }),
);

const noOversell = (naive: boolean) =>
  fc.asyncProperty(demand, async ({ stock, orders }) => {
    await pool.query(`TRUNCATE orders; DELETE FROM stock; INSERT INTO stock VALUES ('apple', ${stock})`);
    const outcomes = await concurrently(orders.length, naive, async (i, afterRead) => {
      const qty = orders[i]!;
      if (naive) {
        const { rows } = await pool.query("SELECT left_units FROM stock WHERE sku = 'apple'");
        await afterRead();
        if (rows[0].left_units < qty) return 'refused';
        await pool.query("UPDATE stock SET left_units = $1 WHERE sku = 'apple'", [rows[0].left_units - qty]);
        await pool.query('INSERT INTO orders (qty) VALUES ($1)', [qty]);
        return 'sold';
      }
      const r = await tm.do(async (tx) => {
        const sold = await updateWhere(tx, {
          text: "UPDATE stock SET left_units = left_units - $1 WHERE sku = 'apple' AND left_units >= $1",
          values: [qty],
        });
        if (sold.isErr()) return sold;
        await tx.query('INSERT INTO orders (qty) VALUES ($1)', [qty]);
        return ok('sold');
      });
      return r.isOk() ? 'sold' : r.error.kind === 'ConditionFailed' ? 'refused' : r.error.kind;
    });
    const { sold, left } = await one(
      'SELECT (SELECT coalesce(sum(qty), 0)::int FROM orders) AS sold, (SELECT left_units FROM stock) AS left',
    );
    expect(sold).toBeLessThanOrEqual(stock); // no oversell
    expect(sold! + left!).toBe(stock); // no lost update
    // no false refusal: a refused order wanted more than what is left even at the end
    orders.forEach((qty, i) => {
      if (outcomes[i] === 'refused') expect(qty).toBeGreaterThan(left!);
    });
  });

// ---- no overlapping bookings ----------------------------------------------------------------------
// A random mix of book / move / cancel; two bookings exist before the run (targets of move and cancel).
const request = fc.record({
  op: fc.constantFrom('book', 'book', 'move', 'cancel'),
  target: fc.integer({ min: 0, max: 1 }),
  room: fc.integer({ min: 1, max: 2 }),
  start: fc.integer({ min: 0, max: 16 }).map((q) => q * 15),
  minutes: fc.integer({ min: 1, max: 6 }).map((q) => q * 15),
});
// The first request is a booking, repeated, so at least two requests overlap.
const requests = fc
  .tuple(request, fc.array(request, { maxLength: 8 }))
  .map(([first, rest]) => [{ ...first, op: 'book' }, { ...first, op: 'book' }, ...rest]);
const base = Date.UTC(2030, 0, 1);
const period = (r: { start: number; minutes: number }) => ({
  from: new Date(base + r.start * 60_000),
  to: new Date(base + (r.start + r.minutes) * 60_000),
});

const noOverlap = (naive: boolean) =>
  fc.asyncProperty(requests, async (reqs) => {
    const table = naive ? 'naive_bookings' : 'bookings';
    await pool.query(`TRUNCATE ${table}`);
    const seeded = await pool.query<{ id: number }>(
      `INSERT INTO ${table} (room_id, during) VALUES
         (1, tstzrange('2030-01-01 10:00Z', '2030-01-01 11:00Z')), (2, tstzrange('2030-01-01 10:00Z', '2030-01-01 11:00Z'))
       RETURNING id`,
    );
    const targets = seeded.rows.map((r) => r.id);
    const outcomes = await concurrently(reqs.length, naive, async (i, afterRead) => {
      const r = reqs[i]!;
      const { from, to } = period(r);
      if (naive) {
        // the control books (whatever the op): read, then insert if nothing overlapped
        const seen = await pool.query(
          `SELECT 1 FROM ${table} WHERE room_id = $1 AND during && tstzrange($2, $3, '[)')`,
          [r.room, from, to],
        );
        await afterRead();
        if (seen.rowCount) return 'Overlap';
        await pool.query(`INSERT INTO ${table} (room_id, during) VALUES ($1, tstzrange($2, $3, '[)'))`, [
          r.room,
          from,
          to,
        ]);
        return 'ok';
      }
      const result = await tm.do(async (tx) => {
        const id = targets[r.target]!;
        const b =
          r.op === 'book'
            ? await rooms.book(tx, { resource: r.room, from, to })
            : r.op === 'move'
              ? await rooms.move(tx, id, { from, to })
              : await rooms.cancel(tx, id);
        if (b.isErr() && b.error.kind !== 'Overlap' && b.error.kind !== 'NotFound') throw b.error; // retryable
        return b;
      });
      return result.isOk() ? 'ok' : result.error.kind;
    });
    const { overlapping } = await one(
      `SELECT count(*)::int AS overlapping FROM ${table} a JOIN ${table} b ON a.room_id = b.room_id AND a.id < b.id AND a.during && b.during`,
    );
    expect(overlapping).toBe(0);
    for (const [i, o] of outcomes.entries()) {
      const op = reqs[i]!.op;
      expect(
        op === 'cancel'
          ? ['ok', 'NotFound']
          : op === 'move'
            ? ['ok', 'Overlap', 'NotFound']
            : ['ok', 'Overlap'],
      ).toContain(o);
    }
    // with bookings only, every refusal is justified by a booking that is really there
    if (reqs.every((r) => r.op === 'book')) {
      for (const [i, o] of outcomes.entries()) {
        if (o !== 'Overlap') continue;
        const { from, to } = period(reqs[i]!);
        const hit = await pool.query(
          `SELECT 1 FROM ${table} WHERE room_id = $1 AND during && tstzrange($2, $3, '[)')`,
          [reqs[i]!.room, from, to],
        );
        expect(hit.rowCount).toBeGreaterThan(0);
      }
    }
  });

// ---- one effect per idempotency key --------------------------------------------------------------
const calls = fc
  .tuple(fc.integer({ min: 0, max: 3 }), fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 9 }))
  .map(([first, rest]) => [first, first, ...rest].map((k) => `key-${k}`));

const oneEffectPerKey = (naive: boolean) =>
  fc.asyncProperty(calls, async (ks) => {
    await pool.query('TRUNCATE payments, naive_requests, request_keys');
    const pay = async (tx: Pick<Tx, 'query'>, key: string) =>
      (await tx.query<{ id: number }>('INSERT INTO payments (request) VALUES ($1) RETURNING id', [key]))
        .rows[0]!.id;
    const results = await concurrently(ks.length, naive, async (i, afterRead) => {
      const key = ks[i]!;
      if (naive) {
        const seen = await pool.query<{ payment_id: number }>(
          'SELECT payment_id FROM naive_requests WHERE key = $1',
          [key],
        );
        await afterRead();
        if (seen.rows[0]) return seen.rows[0].payment_id;
        const id = await pay(pool, key);
        await pool.query('INSERT INTO naive_requests VALUES ($1, $2)', [key, id]);
        return id;
      }
      const r = await keys.run(key, (tx) => pay(tx, key), { fingerprint: 'pay' });
      return r._unsafeUnwrap().result;
    });
    const { payments, distinct } = await one(
      'SELECT count(*)::int AS payments, count(DISTINCT request)::int AS distinct FROM payments',
    );
    expect(payments).toBe(distinct); // one effect per key
    expect(distinct).toBe(new Set(ks).size);
    for (const [i, key] of ks.entries()) expect(results[i]).toBe(results[ks.indexOf(key)]); // same answer
  });

// ---- serializable keeps an invariant over a set of rows ------------------------------------------
const shift = fc.integer({ min: 2, max: 5 }).chain((doctors) =>
  fc.record({
    doctors: fc.constant(doctors),
    goers: fc.shuffledSubarray([...Array(doctors).keys()], { minLength: 1 }),
  }),
);
const everyone = fc.integer({ min: 2, max: 5 }).chain((doctors) =>
  fc.record({
    doctors: fc.constant(doctors),
    goers: fc.shuffledSubarray([...Array(doctors).keys()], { minLength: doctors }),
  }),
);

const atLeastOneOnCall = (naive: boolean) =>
  fc.asyncProperty(naive ? everyone : shift, async ({ doctors, goers }) => {
    await pool.query(
      `DELETE FROM doctors; INSERT INTO doctors SELECT g, true FROM generate_series(0, ${doctors - 1}) g`,
    );
    const g = gate();
    const all = goers.map((doctor) =>
      tm.do(
        async (tx) => {
          const { rows } = await tx.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM doctors WHERE on_call',
          );
          if (tx.attempt === 1) await g.at('read');
          if ((rows[0]?.n ?? 0) < 2) return err(new ConditionFailed());
          await tx.query('UPDATE doctors SET on_call = false WHERE id = $1', [doctor]);
          return ok(doctor);
        },
        { isolation: naive ? 'read committed' : 'serializable' },
      ),
    );
    await g.reached('read', goers.length);
    g.open('read');
    const results = await Promise.all(all);
    const { on_call } = await one('SELECT count(*)::int AS on_call FROM doctors WHERE on_call');
    expect(on_call).toBeGreaterThanOrEqual(1); // the invariant
    expect(results.every((r) => r.isOk() || r.error.kind === 'ConditionFailed')).toBe(true);
    expect(on_call).toBe(Math.max(1, doctors - goers.length)); // and nobody was refused for nothing
  });

/** The control must fail THIS property (the invariant's own assertion), not crash. */
async function expectCaught<T>(property: fc.IAsyncProperty<T>, invariant: RegExp) {
  const error: unknown = await fc.assert(property, { numRuns: 3 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(String((error as Error | undefined)?.message)).toMatch(/Property failed/);
  expect(String(((error as Error).cause as Error | undefined)?.message)).toMatch(invariant);
}

describe('pattern invariants under concurrency (with naive controls)', () => {
  it('no oversell with updateWhere', async () => {
    await fc.assert(noOversell(false), RUNS);
  });
  it('control: naive read-check-write oversells, and the property catches it', async () => {
    await expectCaught(noOversell(true), /less than or equal to/);
  });

  it('no overlapping bookings with a random mix of Bookings.book / move / cancel', async () => {
    await fc.assert(noOverlap(false), { numRuns: 10 });
  });
  it('control: naive check-then-insert double-books, and the property catches it', async () => {
    await expectCaught(noOverlap(true), /expected [1-9]\d* to be \+0/);
  });

  it('no duplicate effect per idempotency key with IdempotencyKeys.run', async () => {
    await fc.assert(oneEffectPerKey(false), RUNS);
  });
  it('control: naive "SELECT key, then pay" pays twice, and the property catches it', async () => {
    await expectCaught(oneEffectPerKey(true), /expected \d+ to be \d+/);
  });

  it('serializable + retry keeps "at least one doctor on call"', async () => {
    await fc.assert(atLeastOneOnCall(false), RUNS);
  });
  it('control: the same code at read committed breaks it (write skew), and the property catches it', async () => {
    await expectCaught(atLeastOneOnCall(true), /expected 0 to be greater than or equal to 1/);
  });
});
