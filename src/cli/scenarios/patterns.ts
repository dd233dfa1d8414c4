import { err, ok } from 'neverthrow';
import pg from 'pg';
import { ConditionFailed } from '../../errors/index.js';
import { Bookings } from '../../patterns/bookings.js';
import { IdempotencyKeys } from '../../patterns/idempotency-keys.js';
import { lockRows } from '../../patterns/lock-rows.js';
import { updateWhere } from '../../patterns/update-where.js';
import { TxManager } from '../../tx/tx-manager.js';
import type { Scenario, ScenarioContext, ScenarioResult, SideResult } from '../scenario.js';

/**
 * Demo scenarios of the row-level patterns. Each runs the same workload twice with many concurrent
 * clients: the naive version (read in the application, check, write) and the pg-txkit pattern, then
 * counts anomalies with a checker query. To make the naive race certain rather than likely, the naive
 * clients meet at a barrier between their read and their write (what a slow request does by accident).
 * The pattern side needs no barrier, and could not use one where it holds row locks.
 */

/** A reusable barrier for `parties` loops; aborting releases everyone. */
class Barrier {
  readonly #parties: number;
  #waiting: (() => void)[] = [];
  constructor(parties: number, signal: AbortSignal) {
    this.#parties = parties;
    signal.addEventListener('abort', () => this.#release(), { once: true });
  }
  wait(): Promise<void> {
    return new Promise((resolve) => {
      this.#waiting.push(resolve);
      if (this.#waiting.length >= this.#parties) this.#release();
    });
  }
  #release(): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const resolve of waiting) resolve();
  }
}

interface Workload {
  readonly pool: pg.Pool;
  readonly tm: TxManager;
  readonly clients: number;
  readonly rounds: number;
  readonly context: ScenarioContext;
  progress(): void;
}

async function withWorkload<T>(
  context: ScenarioContext,
  baseRounds: number,
  fn: (w: Workload) => Promise<T>,
): Promise<T> {
  const clients = Math.max(2, context.clients);
  const rounds = Math.max(3, Math.round(baseRounds * context.scale));
  const pool = new pg.Pool({ connectionString: context.url, max: clients + 2 });
  pool.on('error', () => {});
  let done = 0;
  try {
    return await fn({
      pool,
      tm: new TxManager(pool, { defaults: { maxAttempts: 20, backoff: { baseMs: 1, capMs: 50 } } }),
      clients,
      rounds,
      context,
      progress: () => context.onProgress(++done, rounds * clients * 2),
    });
  } finally {
    await pool.end();
  }
}

/** Runs `clients` loops of `rounds` operations; returns operations done and the elapsed time. */
async function drive(
  w: Workload,
  op: (client: number, round: number, barrier: Barrier) => Promise<void>,
): Promise<{ operations: number; startedAt: number }> {
  const barrier = new Barrier(w.clients, w.context.signal);
  const startedAt = performance.now();
  let operations = 0;
  await Promise.all(
    Array.from({ length: w.clients }, async (_, client) => {
      for (let round = 0; round < w.rounds && !w.context.signal.aborted; round++) {
        await op(client, round, barrier);
        operations++;
        w.progress();
      }
    }),
  );
  return { operations, startedAt };
}

function side(run: { operations: number; startedAt: number }, anomalies: number): SideResult {
  const seconds = Math.max(0.001, (performance.now() - run.startedAt) / 1000);
  return { operations: run.operations, anomalies, opsPerSec: Math.round(run.operations / seconds) };
}

async function count(pool: pg.Pool, sql: string): Promise<number> {
  const r = await pool.query<{ n: number | null }>(sql);
  return Number(r.rows[0]?.n ?? 0);
}

/** Throws a retryable database failure so tm.do retries; returns domain errors as values. */
function rethrowDatabase<E extends { kind: string }>(error: E): E {
  if (['ConditionFailed', 'NotFound', 'Overlap', 'IdempotencyConflict', 'InProgress'].includes(error.kind))
    return error;
  throw error;
}

/** wallet-transfer: lost updates. Naive writes absolute balances computed in the app. */
async function walletTransfer(context: ScenarioContext): Promise<ScenarioResult> {
  return withWorkload(context, 40, async (w) => {
    await w.pool.query(`
      CREATE TABLE naive_wallets (id int PRIMARY KEY, balance int NOT NULL);
      CREATE TABLE wallets (id int PRIMARY KEY, balance int NOT NULL);
      CREATE TABLE naive_transfers (from_id int, to_id int, amount int);
      CREATE TABLE transfers (from_id int, to_id int, amount int);
      INSERT INTO naive_wallets SELECT g, 1000000 FROM generate_series(1, 4) g;
      INSERT INTO wallets SELECT g, 1000000 FROM generate_series(1, 4) g;`);
    // Every transfer takes from wallet 1 and gives to one of wallets 2–4, so a wallet only ever loses or
    // only ever gains: each lost update moves its balance the same way, and lost updates cannot cancel
    // out (with wallets both paying and receiving, the naive side's errors were a random walk that came
    // back to zero by chance in some small runs).
    const pair = (client: number, round: number): [number, number] => [1, 2 + ((client + round) % 3)];
    // Each wallet's balance must equal its initial balance plus the ledger: the difference is what lost
    // updates destroyed or created.
    const checker = (wallets: string, transfers: string) => `
      SELECT coalesce(sum(abs(w.balance - (1000000
        + coalesce((SELECT sum(amount) FROM ${transfers} t WHERE t.to_id = w.id), 0)
        - coalesce((SELECT sum(amount) FROM ${transfers} t WHERE t.from_id = w.id), 0)))), 0)::int AS n
      FROM ${wallets} w`;

    const naiveRun = await drive(w, async (client, round, barrier) => {
      const [from, to] = pair(client, round);
      const r = await w.pool.query<{ id: number; balance: number }>(
        'SELECT id, balance FROM naive_wallets WHERE id = ANY($1)',
        [[from, to]],
      );
      await barrier.wait(); // everyone has read; now everyone writes what they computed
      const balance = (id: number) => r.rows.find((row) => row.id === id)?.balance ?? 0;
      if (balance(from) < 1) return;
      await w.pool.query('UPDATE naive_wallets SET balance = $2 WHERE id = $1', [from, balance(from) - 1]);
      await w.pool.query('UPDATE naive_wallets SET balance = $2 WHERE id = $1', [to, balance(to) + 1]);
      await w.pool.query('INSERT INTO naive_transfers VALUES ($1, $2, 1)', [from, to]);
    });
    const naive = side(naiveRun, await count(w.pool, checker('naive_wallets', 'naive_transfers')));

    const patternRun = await drive(w, async (client, round) => {
      const [from, to] = pair(client, round);
      await w.tm.doOrThrow(async (tx) => {
        // Both rows locked in key order in one statement: opposite transfers never deadlock.
        const locked = await lockRows<{ id: number; balance: number }>(tx, {
          table: 'wallets',
          ids: [from, to],
        });
        if (locked.isErr()) throw locked.error;
        const source = locked.value.rows.find((row) => row.id === from);
        if (!source || source.balance < 1) return;
        await tx.query('UPDATE wallets SET balance = balance - 1 WHERE id = $1', [from]);
        await tx.query('UPDATE wallets SET balance = balance + 1 WHERE id = $1', [to]);
        await tx.query('INSERT INTO transfers VALUES ($1, $2, 1)', [from, to]);
      });
    });
    const pattern = side(patternRun, await count(w.pool, checker('wallets', 'transfers')));
    return {
      naive,
      pattern,
      anomalyLabel: 'units lost/created',
      note: 'naive = SELECT balances, compute, UPDATE absolute values; pattern = lockRows (FOR NO KEY UPDATE, key order) + relative UPDATEs',
    };
  });
}

/** seat-booking: double-sold seats. Every client tries the same seat each round. */
async function seatBooking(context: ScenarioContext): Promise<ScenarioResult> {
  return withWorkload(context, 40, async (w) => {
    await w.pool.query(`
      CREATE TABLE naive_seats (id int PRIMARY KEY, status text NOT NULL DEFAULT 'free', customer int);
      CREATE TABLE seats (id int PRIMARY KEY, status text NOT NULL DEFAULT 'free', customer int);
      CREATE TABLE naive_tickets (seat_id int, customer int);
      CREATE TABLE tickets (seat_id int, customer int);
      INSERT INTO naive_seats (id) SELECT g FROM generate_series(0, ${w.rounds}) g;
      INSERT INTO seats (id) SELECT g FROM generate_series(0, ${w.rounds}) g;`);
    const checker = (t: string) => `SELECT (count(*) - count(DISTINCT seat_id))::int AS n FROM ${t}`;
    const naiveRun = await drive(w, async (client, seat, barrier) => {
      const r = await w.pool.query<{ status: string }>('SELECT status FROM naive_seats WHERE id = $1', [
        seat,
      ]);
      await barrier.wait();
      if (r.rows[0]?.status !== 'free') return;
      await w.pool.query("UPDATE naive_seats SET status = 'booked', customer = $2 WHERE id = $1", [
        seat,
        client,
      ]);
      await w.pool.query('INSERT INTO naive_tickets VALUES ($1, $2)', [seat, client]);
    });
    const naive = side(naiveRun, await count(w.pool, checker('naive_tickets')));
    const patternRun = await drive(w, async (client, seat) => {
      await w.tm.do(async (tx) => {
        const booked = await updateWhere(tx, {
          text: "UPDATE seats SET status = 'booked', customer = $2 WHERE id = $1 AND status = 'free'",
          values: [seat, client],
        });
        if (booked.isErr()) return err(rethrowDatabase(booked.error)); // seat taken: nothing to do
        await tx.query('INSERT INTO tickets VALUES ($1, $2)', [seat, client]);
        return ok(undefined);
      });
    });
    const pattern = side(patternRun, await count(w.pool, checker('tickets')));
    return {
      naive,
      pattern,
      anomalyLabel: 'double-sold seats',
      note: "naive = SELECT status, then UPDATE; pattern = updateWhere(… WHERE status = 'free') → ConditionFailed",
    };
  });
}

/** stock-decrement: oversold units. Stock is smaller than the demand. */
async function stockDecrement(context: ScenarioContext): Promise<ScenarioResult> {
  return withWorkload(context, 40, async (w) => {
    const stock = Math.max(2, Math.floor((w.rounds * w.clients) / 4));
    await w.pool.query(`
      CREATE TABLE naive_stock (sku text PRIMARY KEY, left_units int NOT NULL);
      CREATE TABLE stock (sku text PRIMARY KEY, left_units int NOT NULL);
      CREATE TABLE naive_orders (sku text, customer int);
      CREATE TABLE orders (sku text, customer int);
      INSERT INTO naive_stock VALUES ('apple', ${stock});
      INSERT INTO stock VALUES ('apple', ${stock});`);
    const checker = (t: string) => `SELECT greatest(count(*) - ${stock}, 0)::int AS n FROM ${t}`;
    const naiveRun = await drive(w, async (client, _round, barrier) => {
      const r = await w.pool.query<{ left_units: number }>(
        "SELECT left_units FROM naive_stock WHERE sku = 'apple'",
      );
      await barrier.wait();
      const left = r.rows[0]?.left_units ?? 0;
      if (left < 1) return;
      await w.pool.query("UPDATE naive_stock SET left_units = $1 WHERE sku = 'apple'", [left - 1]);
      await w.pool.query("INSERT INTO naive_orders VALUES ('apple', $1)", [client]);
    });
    const naive = side(naiveRun, await count(w.pool, checker('naive_orders')));
    const patternRun = await drive(w, async (client) => {
      await w.tm.do(async (tx) => {
        const sold = await updateWhere(tx, {
          text: "UPDATE stock SET left_units = left_units - $1 WHERE sku = 'apple' AND left_units >= $1",
          values: [1],
        });
        if (sold.isErr()) return err(rethrowDatabase(sold.error)); // sold out
        await tx.query("INSERT INTO orders VALUES ('apple', $1)", [client]);
        return ok(undefined);
      });
    });
    const pattern = side(patternRun, await count(w.pool, checker('orders')));
    return {
      naive,
      pattern,
      anomalyLabel: 'oversold units',
      note: `${stock} units for ${w.rounds * w.clients} orders; pattern = updateWhere(SET n = n - $1 WHERE n >= $1)`,
    };
  });
}

/** room-booking: overlapping bookings. Everyone books the same room at overlapping times. */
async function roomBooking(context: ScenarioContext): Promise<ScenarioResult> {
  return withWorkload(context, 30, async (w) => {
    await w.pool.query(`
      CREATE TABLE naive_bookings (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL);
      CREATE TABLE bookings (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL);`);
    const rooms = new Bookings({ table: 'bookings', resource: 'room_id', during: 'during' });
    (await rooms.migrate(w.pool))._unsafeUnwrap();
    const slot = (client: number, round: number) => {
      const from = new Date(Date.UTC(2030, 0, 1 + round, 9, client * 5));
      return { from, to: new Date(from.getTime() + 60 * 60_000) };
    };
    const checker = (t: string) => `SELECT count(*)::int AS n FROM ${t} a JOIN ${t} b
      ON a.room_id = b.room_id AND a.id < b.id AND a.during && b.during`;
    const naiveRun = await drive(w, async (client, round, barrier) => {
      const { from, to } = slot(client, round);
      const r = await w.pool.query(
        "SELECT 1 FROM naive_bookings WHERE room_id = 1 AND during && tstzrange($1, $2, '[)')",
        [from, to],
      );
      await barrier.wait();
      if ((r.rowCount ?? 0) > 0) return;
      await w.pool.query("INSERT INTO naive_bookings (room_id, during) VALUES (1, tstzrange($1, $2, '[)'))", [
        from,
        to,
      ]);
    });
    const naive = side(naiveRun, await count(w.pool, checker('naive_bookings')));
    const patternRun = await drive(w, async (client, round) => {
      const { from, to } = slot(client, round);
      await w.tm.do(async (tx) => {
        const r = await rooms.book(tx, { resource: 1, from, to });
        return r.isErr() ? err(rethrowDatabase(r.error)) : ok(r.value);
      });
    });
    const pattern = side(patternRun, await count(w.pool, checker('bookings')));
    return {
      naive,
      pattern,
      anomalyLabel: 'overlapping bookings',
      note: 'naive = SELECT overlapping, then INSERT; pattern = Bookings.book (EXCLUDE USING gist) → Overlap',
    };
  });
}

/** idempotent-payment: duplicate payments. Every client retries the same request key each round. */
async function idempotentPayment(context: ScenarioContext): Promise<ScenarioResult> {
  return withWorkload(context, 40, async (w) => {
    await w.pool.query(`
      CREATE TABLE naive_requests (key text, payment_id int);
      CREATE TABLE naive_payments (id serial PRIMARY KEY, request text, amount int);
      CREATE TABLE payments (id serial PRIMARY KEY, request text, amount int);`);
    const keys = new IdempotencyKeys(w.tm, { table: 'payment_requests' });
    (await keys.migrate())._unsafeUnwrap();
    const checker = (t: string) => `SELECT (count(*) - count(DISTINCT request))::int AS n FROM ${t}`;
    const naiveRun = await drive(w, async (_client, round, barrier) => {
      const key = `req-${round}`;
      const seen = await w.pool.query('SELECT payment_id FROM naive_requests WHERE key = $1', [key]);
      await barrier.wait();
      if ((seen.rowCount ?? 0) > 0) return; // "already paid": replay
      const p = await w.pool.query<{ id: number }>(
        'INSERT INTO naive_payments (request, amount) VALUES ($1, 100) RETURNING id',
        [key],
      );
      await w.pool.query('INSERT INTO naive_requests VALUES ($1, $2)', [key, p.rows[0]?.id]);
    });
    const naive = side(naiveRun, await count(w.pool, checker('naive_payments')));
    const patternRun = await drive(w, async (_client, round) => {
      const key = `req-${round}`;
      await keys.run(
        key,
        async (tx) => {
          const p = await tx.query<{ id: number }>(
            'INSERT INTO payments (request, amount) VALUES ($1, 100) RETURNING id',
            [key],
          );
          return { paymentId: p.rows[0]?.id };
        },
        { fingerprint: 'amount=100' },
      );
    });
    const pattern = side(patternRun, await count(w.pool, checker('payments')));
    return {
      naive,
      pattern,
      anomalyLabel: 'duplicate payments',
      note: 'naive = SELECT key, then INSERT payment + key; pattern = IdempotencyKeys.run (key row in the same transaction)',
    };
  });
}

/** on-call-doctors: write skew. Every doctor of a shift tries to go off call at once. */
async function onCallDoctors(context: ScenarioContext): Promise<ScenarioResult> {
  return withWorkload(context, 30, async (w) => {
    for (const t of ['naive_doctors', 'doctors']) {
      await w.pool.query(`CREATE TABLE ${t} (shift int, doctor int, on_call boolean NOT NULL, PRIMARY KEY (shift, doctor));
        INSERT INTO ${t} SELECT s, d, true FROM generate_series(0, ${w.rounds}) s, generate_series(0, ${w.clients - 1}) d`);
    }
    const checker = (t: string) =>
      `SELECT count(*)::int AS n FROM (SELECT shift FROM ${t} GROUP BY shift HAVING NOT bool_or(on_call)) broken`;
    const goOffCall =
      (table: string, shift: number, doctor: number, barrier: Barrier) =>
      async (tx: { query: pg.Pool['query']; attempt?: number }) => {
        const r = await tx.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${table} WHERE shift = $1 AND on_call`,
          [shift],
        );
        if ((tx.attempt ?? 1) === 1) await barrier.wait();
        if ((r.rows[0]?.n ?? 0) < 2) return err(new ConditionFailed()); // last one on call stays
        await tx.query(`UPDATE ${table} SET on_call = false WHERE shift = $1 AND doctor = $2`, [
          shift,
          doctor,
        ]);
        return ok(undefined);
      };
    const naiveRun = await drive(w, async (doctor, shift, barrier) => {
      await w.tm.do(goOffCall('naive_doctors', shift, doctor, barrier), { isolation: 'read committed' });
    });
    const naive = side(naiveRun, await count(w.pool, checker('naive_doctors')));
    const patternRun = await drive(w, async (doctor, shift, barrier) => {
      await w.tm.do(goOffCall('doctors', shift, doctor, barrier), { isolation: 'serializable' });
    });
    const pattern = side(patternRun, await count(w.pool, checker('doctors')));
    return {
      naive,
      pattern,
      anomalyLabel: 'shifts with nobody on call',
      note: 'same code; naive at read committed, pattern at serializable with tm.do retries (40001)',
    };
  });
}

/** The row-level pattern scenarios of `pg-txkit demo`. */
export const scenarios: Scenario[] = [
  {
    id: 'wallet-transfer',
    title: 'Wallet transfers (lost updates)',
    pattern: 'lockRows',
    run: walletTransfer,
  },
  { id: 'seat-booking', title: 'Seat booking (double sale)', pattern: 'updateWhere', run: seatBooking },
  { id: 'stock-decrement', title: 'Stock decrement (oversell)', pattern: 'updateWhere', run: stockDecrement },
  { id: 'room-booking', title: 'Room booking (overlaps)', pattern: 'Bookings', run: roomBooking },
  {
    id: 'idempotent-payment',
    title: 'Payment retries (duplicates)',
    pattern: 'IdempotencyKeys',
    run: idempotentPayment,
  },
  {
    id: 'on-call-doctors',
    title: 'On-call doctors (write skew)',
    pattern: 'serializable + retry',
    run: onCallDoctors,
  },
];
