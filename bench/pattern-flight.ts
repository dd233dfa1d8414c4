// The patterns' own statements in one flight: Bookings.book() inside a transaction sends SAVEPOINT, its
// INSERT and RELEASE SAVEPOINT up to one Sync (one round trip) where it sent each on its own (three).
//
// Contenders, in interleaved rounds (the order rotates each round), 8 concurrent loops each booking
// slots of its own resource (no overlap, no waiting: this measures round trips, not contention):
// - book() as the first statement of tm.do, one statement per round trip (as before): BEGIN with
//   SAVEPOINT, INSERT, RELEASE, COMMIT                                         (4 round trips) — BASELINE
// - the same with the flight: BEGIN + SAVEPOINT + INSERT + RELEASE, COMMIT      (2)
// - after a first statement of the callback, one by one: BEGIN + SELECT, SAVEPOINT, INSERT, RELEASE,
//   COMMIT                                                                       (5)
// - the same with the flight: BEGIN + SELECT, SAVEPOINT + INSERT + RELEASE, COMMIT (3)
// "One by one" is book() given a queryable of the user's own around the same `tx` (the path a pg-native
// client takes): exactly the statements it sent before, each in its own round trip.
// Each contender runs twice: on localhost, and through a proxy that delays every packet by 1 ms each
// way (a same-zone network), where round trips, not CPU, decide.
//
// Build and run: npm run build:bench, then `node scripts/bench.mjs --only pattern-flight`.
import pg from 'pg';
import type { BenchModule } from '../src/cli/bench.js';
import type { BenchResult } from '../src/cli/render-ratio-chart.js';
import { Bookings } from '../src/patterns/bookings.js';
import { FaultProxy } from '../src/testing/fault-proxy.js';
import { TxManager } from '../src/tx/tx-manager.js';
import type { Queryable, Tx } from '../src/tx/types.js';
import { cpuPerCall, interleaved, median, range } from './support/rounds.js';

/** Concurrent loops. */
const LOOPS = 8;
/** Interleaved rounds per contender; the median round counts (min–max in the notes). */
const ROUNDS = 5;
/** One-way delay of the proxied variant, in ms. */
const DELAY_MS = 1;

/** What the bench runner gives {@link run}. */
type BenchContext = Parameters<BenchModule['run']>[0];

/** One transaction of a loop: `loop` is the loop's resource, `n` its next free slot. */
type Transaction = (loop: number, n: number) => Promise<void>;

/** `tx` as a queryable of the user's own: book() sends its statements one by one on it, as it did before. */
function oneByOne(tx: Tx): Queryable {
  return { query: tx.query.bind(tx), getTransactionStatus: () => 'T' } as Queryable;
}

/**
 * Measures Bookings.book() inside a transaction with and without the flight, on localhost and with
 * 1 ms of delay each way.
 *
 * @example
 * const result = await run({ url, durationMs: 10000, onProgress: () => {}, signal: new AbortController().signal });
 * console.table(result.rows);
 */
export async function run(context: BenchContext): Promise<BenchResult> {
  const { signal, onProgress } = context;
  const proxy = await FaultProxy.start({ target: context.url });
  proxy.latency(DELAY_MS);
  const pools = {
    localhost: new pg.Pool({ connectionString: context.url, max: LOOPS + 2 }),
    [`${DELAY_MS} ms each way`]: new pg.Pool({ connectionString: proxy.url, max: LOOPS + 2 }),
  };
  for (const pool of Object.values(pools)) pool.on('error', () => {});
  const rooms = new Bookings({ table: 'bench_bookings', resource: 'room', during: 'during' });
  const slot = (loop: number, n: number) => ({
    resource: loop,
    from: new Date(Date.UTC(2030, 0, 1) + n * 3_600_000),
    to: new Date(Date.UTC(2030, 0, 1) + (n + 1) * 3_600_000),
  });

  const contenders: { name: string; tx: Transaction }[] = [];
  for (const [where, pool] of Object.entries(pools)) {
    const tm = new TxManager(pool);
    const book = async (db: Tx | Queryable, loop: number, n: number) => {
      (await rooms.book(db, slot(loop, n)))._unsafeUnwrap();
    };
    contenders.push(
      {
        name: `${where}: book() first, one by one (4 round trips)`,
        tx: (loop, n) => tm.doOrThrow((tx) => book(oneByOne(tx), loop, n)),
      },
      {
        name: `${where}: book() first, in one flight (2)`,
        tx: (loop, n) => tm.doOrThrow((tx) => book(tx, loop, n)),
      },
      {
        name: `${where}: SELECT, then book(), one by one (5)`,
        tx: (loop, n) =>
          tm.doOrThrow(async (tx) => {
            await tx.query('SELECT 1');
            await book(oneByOne(tx), loop, n);
          }),
      },
      {
        name: `${where}: SELECT, then book(), in one flight (3)`,
        tx: (loop, n) =>
          tm.doOrThrow(async (tx) => {
            await tx.query('SELECT 1');
            await book(tx, loop, n);
          }),
      },
    );
  }
  const baseline = contenders[0]?.name ?? '';
  const next = Array.from({ length: LOOPS }, () => 0);
  const loops = async (ms: number, tx: Transaction) => {
    const started = performance.now();
    let ops = 0;
    await Promise.all(
      Array.from({ length: LOOPS }, async (_, i) => {
        while (performance.now() < started + ms && !signal.aborted) {
          const n = next[i] ?? 0;
          next[i] = n + 1; // slots never reused: no booking ever overlaps another
          await tx(i + 1, n);
          ops++;
        }
      }),
    );
    return ops / Math.max((performance.now() - started) / 1000, 1e-9);
  };
  const totalPhases = contenders.length * ROUNDS;
  let done = 0;
  const roundMs = Math.max(200, Math.floor(context.durationMs / ROUNDS));
  const admin = pools.localhost;
  try {
    await admin.query('DROP TABLE IF EXISTS bench_bookings');
    await admin.query(
      'CREATE TABLE bench_bookings (id bigserial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL)',
    );
    (await rooms.migrate(admin))._unsafeUnwrap();
    for (const c of contenders) await loops(50, c.tx); // warm-up: connections, plans
    const stopped = () => signal.aborted;
    const rates = await interleaved(
      contenders,
      ROUNDS,
      async (c) => {
        const rate = await loops(roundMs, c.tx);
        onProgress(++done, totalPhases);
        return rate;
      },
      stopped,
    );
    const measured = contenders.map((c) => ({
      name: c.name,
      opsPerSec: Math.round(median(rates.get(c.name) ?? [])),
    }));
    const base = measured[0]?.opsPerSec || 1;
    const spread = contenders.map((c) => `${c.name} ${range(rates.get(c.name) ?? [])}`);
    // Node CPU per transaction (one loop, sequential, localhost contenders): the flight's own cost, far
    // less sensitive to a busy machine than throughput. Interleaved rounds; median with min–max.
    const CPU_ROUNDS = 5;
    const CPU_TX = 300;
    const local = contenders.slice(0, 4);
    const cpuSamples = await interleaved(
      local,
      CPU_ROUNDS,
      (c) =>
        cpuPerCall(CPU_TX, () => {
          const n = next[0] ?? 0;
          next[0] = n + 1;
          return c.tx(1, n);
        }),
      stopped,
    );
    const cpu = local.map((c) => {
      const values = cpuSamples.get(c.name) ?? [];
      return `${c.name} ${Math.round(median(values))} (${range(values)})`;
    });
    const ratio = (a: number, b: number) =>
      ((measured[b]?.opsPerSec ?? 0) / (measured[a]?.opsPerSec || 1)).toFixed(2);
    return {
      name: 'pattern-flight',
      baseline,
      rows: measured.map((m) => ({ ...m, ratio: Math.round((m.opsPerSec / base) * 100) / 100 })),
      notes: [
        `${LOOPS} loops, median of ${ROUNDS} interleaved rounds of ${roundMs} ms per contender`,
        `flight vs one by one: localhost ${ratio(0, 1)}x (book first), ${ratio(2, 3)}x (after a SELECT); ` +
          `${DELAY_MS} ms each way ${ratio(4, 5)}x, ${ratio(6, 7)}x`,
        `transactions/s per round, min–max: ${spread.join(', ')}`,
        `node CPU µs per transaction, median (min–max) of ${CPU_ROUNDS} rounds of ${CPU_TX}: ${cpu.join(', ')}`,
      ].join('; '),
    };
  } finally {
    await admin.query('DROP TABLE IF EXISTS bench_bookings').catch(() => {});
    await Promise.all(Object.values(pools).map((pool) => pool.end()));
    await proxy.close();
  }
}
