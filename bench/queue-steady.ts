// Queue steady state (npm run bench -- --only queue-steady): a producer enqueues no-op jobs at a fixed
// rate, one job per statement as an application does (default 2,000 jobs/s for 90 s), while ONE worker
// process (concurrency 8, bench/queue/child.mjs) runs them, for
//   pg-txkit with the worker's DEFAULT options, and graphile-worker 0.17.3 at its best (localQueue 500,
//   completeJobBatchDelay 0, failJobBatchDelay 0),
// in the same run, interleaved (the order rotates each round), N rounds, medians with min–max.
// Variants (PGTXKIT_BENCH_STEADY_VARIANTS, default both):
//   steady         nothing else runs on the server;
//   held-snapshot  another session holds a REPEATABLE READ snapshot (BEGIN ISOLATION LEVEL REPEATABLE
//                  READ; SELECT 1; then idle in transaction) for the whole run: nothing the run deletes or
//                  updates can be vacuumed or marked dead in an index meanwhile.
// Per window (PGTXKIT_BENCH_STEADY_WINDOW seconds, default 5), by enqueue time: latency p50/p99 (enqueue →
// handler start, one wall clock: performance.timeOrigin + performance.now() in both processes), server
// CPU per job (the postmaster and all its backends from /proc/<pid>/stat: the producer's, the worker's,
// autovacuum's, the sampler's; see bench/queue/server-cpu.mjs), the queue table's size with its indexes
// and TOAST (pg_total_relation_size), its dead tuples (pg_stat_user_tables.n_dead_tup), WAL bytes per job
// (pg_current_wal_lsn() difference) and commits per job (pg_stat_database.xact_commit difference; a
// backend reports its counts at most once a second, and the sampler's own few statements count too).
// The whole-run figures leave the first window out (the worker's start, its pool's connections).
// Env: PGTXKIT_BENCH_STEADY_RATE (jobs/s, 2000), PGTXKIT_BENCH_STEADY_SECONDS (90; 15 for a quick run),
// PGTXKIT_BENCH_STEADY_ROUNDS (3), PGTXKIT_BENCH_STEADY_WINDOW (5), PGTXKIT_BENCH_STEADY_VARIANTS
// (steady,held-snapshot). Standalone: `npm run build && npm run build:bench && node
// dist-bench/bench/queue-steady.js`, with pg_stat_statements preloaded: then each contender's statements
// are listed with their calls and execution time per job (not CPU time: waits count too).
import { type ChildProcess, fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { makeWorkerUtils, type WorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { z } from 'zod';
import type { BenchModule } from '../src/cli/bench.js';
import { Queue } from '../src/queue/index.js';
import { TxManager } from '../src/tx/tx-manager.js';
import {
  benchFile,
  fmt,
  loadServerCpuReader,
  median,
  quantile,
  runStandalone,
  spread,
} from './support/queue-bench.js';

const envNumber = (name: string, fallback: number): number => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name}: expected a positive number, got '${raw}'`);
  return n;
};

const RATE = envNumber('PGTXKIT_BENCH_STEADY_RATE', 2000);
const SECONDS = envNumber('PGTXKIT_BENCH_STEADY_SECONDS', 90);
const ROUNDS = envNumber('PGTXKIT_BENCH_STEADY_ROUNDS', 3);
const WINDOW_MS = envNumber('PGTXKIT_BENCH_STEADY_WINDOW', 5) * 1000;
const CONCURRENCY = 8;
/** Enqueue statements in flight at most (the producer's pool has as many connections). */
const PRODUCER_CONNECTIONS = 8;
/** How long the worker may take, after the producer stopped, to start the last jobs. */
const DRAIN_MS = 60_000;

const VARIANTS = ['steady', 'held-snapshot'] as const;
type Variant = (typeof VARIANTS)[number];

type System = 'txkit' | 'graphile';
interface Contender {
  readonly id: string;
  readonly name: string;
  readonly system: System;
  /** BENCH_CONFIG of bench/queue/child.mjs. */
  readonly config: string;
  /** The queue's table, for its size and dead tuples. */
  readonly table: { readonly schema: string; readonly name: string };
}

const CONTENDERS: readonly Contender[] = [
  {
    id: 'txkit-defaults',
    name: 'pg-txkit, worker defaults',
    system: 'txkit',
    config: 'defaults',
    table: { schema: 'bench_txkit', name: 'jobs' },
  },
  {
    id: 'graphile',
    name: 'graphile-worker 0.17.3 (localQueue 500, completeJobBatchDelay 0, failJobBatchDelay 0)',
    system: 'graphile',
    config: 'best',
    table: { schema: 'graphile_worker', name: '_private_jobs' },
  },
];
const BASELINE = 'graphile';

/** The server's counters at one instant. */
interface Sample {
  /** performance.timeOrigin + performance.now() */
  readonly at: number;
  readonly serverCpuUs: number | undefined;
  readonly walLsn: string;
  readonly commits: number;
  readonly tableBytes: number;
  readonly deadTuples: number;
}

/** One window's figures (jobs: enqueued in it). */
interface Window {
  readonly jobs: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly serverCpuUsPerJob: number | undefined;
  readonly walBytesPerJob: number;
  readonly commitsPerJob: number;
  readonly tableBytes: number;
  readonly deadTuples: number;
}

/** One run of one contender: its windows and the figures over all windows but the first. */
interface RunResult {
  readonly windows: readonly Window[];
  readonly jobsPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly serverCpuUsPerJob: number | undefined;
  /** Server cores in use (CPU time ÷ wall time). */
  readonly serverCores: number | undefined;
  readonly walBytesPerJob: number;
  readonly commitsPerJob: number;
  readonly tableBytes: number;
  readonly maxDeadTuples: number;
  /** Jobs whose handler never started before DRAIN_MS after the producer stopped. */
  readonly notStarted: number;
  /** The statements' executions over the whole run but its first window (pg_stat_statements), if loaded. */
  readonly statements: readonly StatementCost[] | undefined;
}

/** One statement's share of the run, from pg_stat_statements (execution time, not CPU: it counts waits too). */
interface StatementCost {
  readonly query: string;
  readonly callsPerJob: number;
  /** total_exec_time ÷ jobs. */
  readonly execUsPerJob: number;
  readonly meanMs: number;
}

/** Whether pg_stat_statements is preloaded on the server (then its view is created if missing). */
async function statementsAvailable(pool: pg.Pool): Promise<boolean> {
  const r = await pool.query<{ libs: string }>('SELECT current_setting($1) AS libs', [
    'shared_preload_libraries',
  ]);
  if (!/\bpg_stat_statements\b/.test(r.rows[0]?.libs ?? '')) return false;
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  return true;
}

/** The statements run in this database since the last reset, as cost per job of `jobs` jobs. */
async function statementCosts(pool: pg.Pool, jobs: number): Promise<StatementCost[]> {
  const r = await pool.query<{ query: string; calls: string; total_ms: number; mean_ms: number }>(
    `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time AS total_ms, mean_exec_time AS mean_ms
       FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query NOT LIKE '%pg_stat_statements%'
      ORDER BY total_exec_time DESC
      LIMIT 12`,
  );
  return r.rows.map((row) => ({
    query: row.query.slice(0, 140),
    callsPerJob: Number(row.calls) / jobs,
    execUsPerJob: (row.total_ms * 1000) / jobs,
    meanMs: row.mean_ms,
  }));
}

const wallClock = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function sample(
  pool: pg.Pool,
  contender: Contender,
  serverCpu: () => number | undefined,
): Promise<Sample> {
  const r = await pool.query<{ lsn: string; commits: string; bytes: string | null; dead: string | null }>(
    `SELECT pg_current_wal_lsn()::text AS lsn,
            (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
            pg_total_relation_size(to_regclass(format('%I.%I', $1::text, $2::text))) AS bytes,
            (SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2) AS dead`,
    [contender.table.schema, contender.table.name],
  );
  const row = r.rows[0];
  if (row === undefined) throw new Error('sample: no row');
  return {
    at: wallClock(),
    serverCpuUs: serverCpu(),
    walLsn: row.lsn,
    commits: Number(row.commits),
    tableBytes: Number(row.bytes ?? 0),
    deadTuples: Number(row.dead ?? 0),
  };
}

/** Bytes between two WAL positions ('16/B374D848'). */
function walBytes(from: string, to: string): number {
  const parse = (lsn: string) => {
    const [hi, lo] = lsn.split('/');
    return BigInt(`0x${hi ?? '0'}`) * 2n ** 32n + BigInt(`0x${lo ?? '0'}`);
  };
  return Number(parse(to) - parse(from));
}

/** An empty queue of `contender`'s system, migrated; returns its enqueue of one job. */
async function prepare(
  contender: Contender,
  url: string,
  pool: pg.Pool,
): Promise<{ enqueue(t: number): Promise<void>; release(): Promise<void> }> {
  if (contender.system === 'txkit') {
    await pool.query('DROP SCHEMA IF EXISTS bench_txkit CASCADE');
    const producer = new pg.Pool({ connectionString: url, max: PRODUCER_CONNECTIONS });
    producer.on('error', () => {});
    const queue = new Queue({
      pool: producer,
      txManager: new TxManager(producer),
      schema: 'bench_txkit',
      tasks: { noop: z.object({ t: z.number() }) },
    });
    (await queue.migrate())._unsafeUnwrap();
    return {
      enqueue: async (t) => {
        (await queue.enqueue(producer, 'noop', { t }))._unsafeUnwrap();
      },
      release: () => producer.end(),
    };
  }
  // Its pool, as many connections as pg-txkit's producer.
  const producer = new pg.Pool({ connectionString: url, max: PRODUCER_CONNECTIONS });
  producer.on('error', () => {});
  // graphile-worker checks that a pool it is given handles its clients' errors.
  producer.on('connect', (client) => client.on('error', () => {}));
  const utils: WorkerUtils = await makeWorkerUtils({ pgPool: producer });
  await utils.migrate();
  await pool.query('DELETE FROM graphile_worker._private_jobs');
  await pool.query('DELETE FROM graphile_worker._private_job_queues');
  return {
    enqueue: async (t) => {
      await utils.addJob('noop', { t });
    },
    release: async () => {
      await utils.release();
      await producer.end();
    },
  };
}

/**
 * Calls `enqueue` RATE times a second for `ms`, at most PRODUCER_CONNECTIONS at once; each job carries
 * the time its statement was sent. Returns the enqueue times.
 */
async function produce(enqueue: (t: number) => Promise<void>, ms: number, signal: AbortSignal) {
  const sent: number[] = [];
  const inFlight = new Set<Promise<void>>();
  let failures = 0;
  const t0 = performance.now();
  for (;;) {
    const elapsed = performance.now() - t0;
    if (elapsed >= ms || signal.aborted) break;
    const due = Math.floor((elapsed * RATE) / 1000);
    while (sent.length < due && inFlight.size < PRODUCER_CONNECTIONS) {
      // Unique: the jobs are told apart by their enqueue time.
      const t = Math.max(wallClock(), (sent.at(-1) ?? 0) + 0.001);
      sent.push(t);
      const p: Promise<void> = enqueue(t)
        .catch(() => {
          failures++;
        })
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
    if (inFlight.size >= PRODUCER_CONNECTIONS) await Promise.race(inFlight);
    else await sleep(1);
  }
  await Promise.all(inFlight);
  if (failures > 0) throw new Error(`${failures} enqueues failed`);
  return sent;
}

/** What child.mjs reports at 'stop' with BENCH_LATENCY=1. */
const childReport = z.object({
  jobs: z.number(),
  enqueuedAt: z.array(z.number()),
  startedAt: z.array(z.number()),
});

/** One run: an empty queue, one worker process, the producer for SECONDS, windows sampled on the way. */
async function steadyRun(
  contender: Contender,
  variant: Variant,
  url: string,
  pool: pg.Pool,
  serverCpu: () => number | undefined,
  signal: AbortSignal,
  withStatements: boolean,
): Promise<RunResult> {
  const producer = await prepare(contender, url, pool);
  // Not timed: what the previous run left goes now, not during this one.
  await pool.query('VACUUM').catch(() => {});
  let child: ChildProcess | undefined;
  let holder: pg.Client | undefined;
  let stopped = false;
  try {
    child = fork(benchFile('child.mjs'), [], {
      env: {
        ...process.env,
        BENCH_SYSTEM: contender.system,
        BENCH_URL: url,
        BENCH_CONFIG: contender.config,
        BENCH_CONCURRENCY: String(CONCURRENCY),
        BENCH_LATENCY: '1',
      },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const worker = child;
    // A 'stop' sent as the process exits fails with EPIPE: nothing to report.
    worker.on('error', () => {});
    const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      worker.once('message', () => resolve());
      worker.once('exit', (code) =>
        reject(new Error(`${contender.name} worker exited (${code}) before ready`)),
      );
    });
    const report = new Promise<z.infer<typeof childReport>>((resolve, reject) => {
      worker.on('message', (m: unknown) => {
        const parsed = childReport.safeParse(m);
        if (parsed.success) resolve(parsed.data);
      });
      void exited.then(() => reject(new Error(`${contender.name} worker exited before its report`)));
    });
    // Awaited below; a run that fails before then must not leave it rejected and unhandled.
    report.catch(() => {});
    if (variant === 'held-snapshot') {
      holder = new pg.Client({ connectionString: url });
      holder.on('error', () => {});
      await holder.connect();
      // The snapshot is taken by the first statement and kept until COMMIT.
      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await holder.query('SELECT 1');
    }
    worker.send('go');
    const samples: Sample[] = [await sample(pool, contender, serverCpu)];
    const t0 = samples[0]?.at ?? wallClock();
    let sampling = true;
    const sampler = (async () => {
      for (let w = 1; sampling; w++) {
        const wait = t0 + w * WINDOW_MS - wallClock();
        if (wait > 0) await sleep(wait);
        if (!sampling) break;
        samples.push(await sample(pool, contender, serverCpu));
        if (w === 1 && withStatements) await pool.query('SELECT pg_stat_statements_reset()');
      }
    })();
    const sent = await produce(producer.enqueue, SECONDS * 1000, signal);
    sampling = false;
    await sampler;
    const afterFirst = samples[1]?.at ?? Number.POSITIVE_INFINITY;
    const statements = withStatements
      ? await statementCosts(pool, sent.filter((t) => t >= afterFirst).length)
      : undefined;
    // The last jobs: wait until the worker ran them all (or DRAIN_MS).
    const drainUntil = performance.now() + DRAIN_MS;
    for (;;) {
      const left = await pool.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${pg.escapeIdentifier(contender.table.schema)}.${pg.escapeIdentifier(contender.table.name)}`,
      );
      if (Number(left.rows[0]?.n ?? 0) === 0 || performance.now() > drainUntil || signal.aborted) break;
      await sleep(50);
    }
    stopped = true;
    worker.send('stop');
    const { enqueuedAt, startedAt } = await report;
    const latencyOf = new Map<number, number>();
    for (const [i, t] of enqueuedAt.entries()) latencyOf.set(t, (startedAt[i] ?? Number.NaN) - t);
    // Windows by enqueue time: the samples that close a whole window.
    const windows: Window[] = [];
    for (let w = 1; w < samples.length; w++) {
      const a = samples[w - 1];
      const b = samples[w];
      if (a === undefined || b === undefined) continue;
      const inWindow = sent.filter((t) => t >= a.at && t < b.at);
      if (inWindow.length === 0) continue;
      const latencies = inWindow.map((t) => latencyOf.get(t) ?? Number.POSITIVE_INFINITY);
      windows.push({
        jobs: inWindow.length,
        p50Ms: quantile(latencies, 0.5),
        p99Ms: quantile(latencies, 0.99),
        serverCpuUsPerJob:
          a.serverCpuUs === undefined || b.serverCpuUs === undefined
            ? undefined
            : (b.serverCpuUs - a.serverCpuUs) / inWindow.length,
        walBytesPerJob: walBytes(a.walLsn, b.walLsn) / inWindow.length,
        commitsPerJob: (b.commits - a.commits) / inWindow.length,
        tableBytes: b.tableBytes,
        deadTuples: b.deadTuples,
      });
    }
    // The whole run but its first window.
    const first = samples[1] ?? samples[0];
    const last = samples.at(-1);
    if (first === undefined || last === undefined) throw new Error('no samples');
    const steady = sent.filter((t) => t >= first.at && t < last.at);
    const latencies = steady.map((t) => latencyOf.get(t) ?? Number.POSITIVE_INFINITY);
    const seconds = (last.at - first.at) / 1000;
    const cpuUs =
      first.serverCpuUs === undefined || last.serverCpuUs === undefined
        ? undefined
        : last.serverCpuUs - first.serverCpuUs;
    return {
      windows,
      jobsPerSec: steady.length / seconds,
      p50Ms: quantile(latencies, 0.5),
      p99Ms: quantile(latencies, 0.99),
      serverCpuUsPerJob: cpuUs === undefined ? undefined : cpuUs / steady.length,
      serverCores: cpuUs === undefined ? undefined : cpuUs / 1e6 / seconds,
      walBytesPerJob: walBytes(first.walLsn, last.walLsn) / steady.length,
      commitsPerJob: (last.commits - first.commits) / steady.length,
      tableBytes: last.tableBytes,
      maxDeadTuples: Math.max(...windows.map((w) => w.deadTuples)),
      notStarted: sent.length - enqueuedAt.length,
      statements,
    };
  } finally {
    await holder?.query('COMMIT').catch(() => {});
    await holder?.end().catch(() => {});
    if (!stopped && child?.connected === true) child.send('stop');
    const running = child;
    if (running !== undefined && running.exitCode === null) {
      const killer = setTimeout(() => running.kill('SIGKILL'), 15_000);
      await new Promise((resolve) => running.once('exit', resolve));
      clearTimeout(killer);
    }
    await producer.release().catch(() => {});
  }
}

const ms = (n: number) => fmt(n, 1);

/** The steady-state queue benchmark (npm run bench -- --only queue-steady). */
export const run: BenchModule['run'] = async ({ url, onProgress, signal }) => {
  // The whole-run figures leave the first window out: there must be another one.
  if (SECONDS * 1000 < 2 * WINDOW_MS)
    throw new Error(
      `PGTXKIT_BENCH_STEADY_SECONDS (${SECONDS}) must cover two windows of PGTXKIT_BENCH_STEADY_WINDOW (${WINDOW_MS / 1000} s) at least`,
    );
  const variants = (process.env.PGTXKIT_BENCH_STEADY_VARIANTS?.split(',') ?? [...VARIANTS]).map((v) => {
    const known = VARIANTS.find((k) => k === v.trim());
    if (known === undefined) throw new Error(`PGTXKIT_BENCH_STEADY_VARIANTS: unknown variant '${v}'`);
    return known;
  });
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  try {
    const serverCpu = await (await loadServerCpuReader())(pool);
    const withStatements = await statementsAvailable(pool);
    const results = new Map<string, RunResult[]>();
    const key = (c: Contender, v: Variant) => `${v}/${c.id}`;
    const load0 = loadavg()[0] ?? 0;
    const total = ROUNDS * variants.length * CONTENDERS.length;
    let done = 0;
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of variants) {
        const order = CONTENDERS.map((_, i) => CONTENDERS[(i + round) % CONTENDERS.length] as Contender);
        for (const contender of order) {
          if (signal.aborted) throw new Error('interrupted');
          onProgress(done++, total);
          const r = await steadyRun(contender, variant, url, pool, serverCpu, signal, withStatements);
          results.set(key(contender, variant), [...(results.get(key(contender, variant)) ?? []), r]);
        }
      }
    }
    onProgress(total, total);
    const load1 = loadavg()[0] ?? 0;
    const lines: string[] = [];
    const rows: { name: string; opsPerSec: number; ratio: number }[] = [];
    for (const variant of variants) {
      lines.push(
        '',
        `${variant}: ${fmt(RATE)} jobs/s for ${SECONDS} s, ${ROUNDS} rounds; median (min–max) over the rounds, each over its windows but the first`,
        '| contender | jobs/s | latency p50 ms | p99 ms | server CPU µs/job | server cores | WAL bytes/job | commits/job | table+indexes MB at the end | dead tuples, max | first window p50/p99 ms | last window p50/p99 ms | last window CPU µs/job |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      );
      const baseCpu = median(
        (results.get(`${variant}/${BASELINE}`) ?? []).map((r) => r.serverCpuUsPerJob ?? Number.NaN),
      );
      for (const c of CONTENDERS) {
        const rs = results.get(key(c, variant)) ?? [];
        const firstW = rs.map((r) => r.windows[0]).filter((w) => w !== undefined);
        const lastW = rs.map((r) => r.windows.at(-1)).filter((w) => w !== undefined);
        const cpu = rs.map((r) => r.serverCpuUsPerJob ?? Number.NaN);
        lines.push(
          `| ${c.name} | ${spread(rs.map((r) => r.jobsPerSec))} | ${spread(
            rs.map((r) => r.p50Ms),
            1,
          )} | ${spread(
            rs.map((r) => r.p99Ms),
            1,
          )} | ${spread(cpu)} | ${spread(
            rs.map((r) => r.serverCores ?? Number.NaN),
            2,
          )} | ${spread(rs.map((r) => r.walBytesPerJob))} | ${spread(
            rs.map((r) => r.commitsPerJob),
            2,
          )} | ${spread(
            rs.map((r) => r.tableBytes / 2 ** 20),
            1,
          )} | ${spread(rs.map((r) => r.maxDeadTuples))} | ${ms(median(firstW.map((w) => w.p50Ms)))}/${ms(
            median(firstW.map((w) => w.p99Ms)),
          )} | ${ms(median(lastW.map((w) => w.p50Ms)))}/${ms(median(lastW.map((w) => w.p99Ms)))} | ${fmt(
            median(lastW.map((w) => w.serverCpuUsPerJob ?? Number.NaN)),
          )} |`,
        );
        const notStarted = rs.reduce((a, r) => a + r.notStarted, 0);
        if (notStarted > 0) lines.push(`(${c.name}: ${notStarted} jobs never started)`);
        rows.push({
          name: `${c.name}, ${variant}`,
          opsPerSec: Math.round(median(rs.map((r) => r.jobsPerSec))),
          // Server CPU per job of the baseline ÷ this contender's: above 1, cheaper than graphile-worker.
          ratio: Math.round((baseCpu / median(cpu)) * 100) / 100,
        });
      }
      // The windows of the last round, one line per window, for the shape of the run.
      for (const c of CONTENDERS) {
        const last = (results.get(key(c, variant)) ?? []).at(-1);
        if (last === undefined) continue;
        if (last.statements !== undefined) {
          lines.push(
            '',
            `${variant}, ${c.name}, last round, its statements (pg_stat_statements, top level; execution time, waits included), whole run but the first window:`,
            '| statement | calls/job | µs/job | mean ms |',
            '|---|---:|---:|---:|',
            ...last.statements.map(
              (st) =>
                `| \`${st.query.replaceAll('|', '\\|')}\` | ${fmt(st.callsPerJob, 3)} | ${fmt(st.execUsPerJob, 1)} | ${fmt(st.meanMs, 3)} |`,
            ),
          );
        }
        lines.push('', `${variant}, ${c.name}, last round, per ${WINDOW_MS / 1000} s window:`);
        lines.push(
          '| window | jobs | p50 ms | p99 ms | server CPU µs/job | WAL bytes/job | commits/job | table+indexes MB | dead tuples |',
          '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
        );
        for (const [i, w] of last.windows.entries())
          lines.push(
            `| ${i + 1} | ${w.jobs} | ${ms(w.p50Ms)} | ${ms(w.p99Ms)} | ${fmt(w.serverCpuUsPerJob)} | ${fmt(
              w.walBytesPerJob,
            )} | ${fmt(w.commitsPerJob, 2)} | ${fmt(w.tableBytes / 2 ** 20, 1)} | ${fmt(w.deadTuples)} |`,
          );
      }
    }
    const notes =
      `steady state: a producer at ${fmt(RATE)} jobs/s (one job per statement, ${PRODUCER_CONNECTIONS} connections), one worker process × concurrency ${CONCURRENCY}, ` +
      `${ROUNDS} interleaved rounds of ${SECONDS} s, ${WINDOW_MS / 1000} s windows; server CPU from /proc (postmaster + backends, autovacuum included); ` +
      `the ratio column is graphile-worker's server CPU per job ÷ the contender's; ` +
      (withStatements
        ? 'per statement: pg_stat_statements; '
        : 'per statement: pg_stat_statements is not preloaded on this server (run standalone: node dist-bench/bench/queue-steady.js); ') +
      `load average ${load0.toFixed(2)} → ${load1.toFixed(2)}`;
    process.stdout.write(`${lines.join('\n')}\n\n${notes}\n`);
    return {
      name: 'queue-steady',
      baseline: CONTENDERS.find((c) => c.id === BASELINE)?.name ?? BASELINE,
      rows,
      notes,
    };
  } finally {
    await pool.end();
  }
};

// Standalone: node dist-bench/bench/queue-steady.js (starts the embedded PostgreSQL, with
// pg_stat_statements preloaded for the statements' costs).
await runStandalone(import.meta.url, run, { settings: { shared_preload_libraries: 'pg_stat_statements' } });
