// Queue benchmark, in ONE process, rounds interleaved (A B C D E, B C D E A, …: the order rotates): a burn-down of 50,000
// no-op jobs by 2 worker processes × concurrency 8 against the same server, for
//   pg-txkit with the worker's DEFAULT options, pg-txkit tuned by hand, graphile-worker 0.17.3 at its
//   best (localQueue 500, completeJobBatchDelay 0, failJobBatchDelay 0), pg-boss 10.4.2 (8 pollers ×
//   batchSize 100), and a minimal hand-written SKIP LOCKED loop (the ceiling).
// Reported per contender: median jobs/s with min–max, the median of its per-round ratio to
// graphile-worker (same round), worker CPU per job (the two processes, user + system; over the whole run,
// and warm: from each process's 5,000th job on, see child.mjs) and server CPU per
// job (the PostgreSQL postmaster and its backends, from /proc, when the server is local). Then pg-txkit's
// enqueue → handler start latency with LISTEN at 100 jobs/s (p50, p99; measured before the rounds, on a
// server with nothing else to do), and pg-txkit defaults ÷ tuned per round (median, min–max).
// Worker processes run bench/queue/child.mjs, which loads pg-txkit from dist/ (`npm run build` first).
// Standalone: `npm run build && npm run build:bench && node dist-bench/bench/queue.js` (env:
// PGTXKIT_BENCH_QUEUE_JOBS, PGTXKIT_BENCH_QUEUE_ROUNDS, PGTXKIT_BENCH_QUEUE_ONLY=txkit-defaults,graphile…).
// Per-key limits: txkit-groups-1000 (the jobs spread round-robin over 1,000 groups, each serial) and
// txkit-groups-4 (4 groups of concurrency 250), each reported ÷ txkit-defaults (unlimited) per round:
// PGTXKIT_BENCH_QUEUE_ONLY=txkit-defaults,txkit-groups-1000,txkit-groups-4 (graphile-worker, the
// baseline, always runs too).
// The server's conditions: txkit-fresh / graphile-fresh burn down a freshly migrated queue whose table was
// never ANALYZEd (the plans chosen without statistics; the sequential scans of the queue's table during
// the burn-down are counted), txkit-held / graphile-held an ANALYZEd one while another session holds a
// REPEATABLE READ snapshot (taken before 'go', released after the burn-down); each reported ÷ its own
// system's analyzed, unheld queue, same round: PGTXKIT_BENCH_QUEUE_ONLY=txkit-defaults,txkit-fresh,
// txkit-held,graphile-fresh,graphile-held.
import { type ChildProcess, fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { makeWorkerUtils } from 'graphile-worker';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { z } from 'zod';
import type { BenchModule } from '../src/cli/bench.js';
import { Queue } from '../src/queue/index.js';
import { TxManager } from '../src/tx/tx-manager.js';
import {
  benchFile,
  chunks,
  fmt,
  loadServerCpuReader,
  median,
  quantile,
  runStandalone,
} from './support/queue-bench.js';

/** Jobs per burn-down. */
const JOBS = Number(process.env.PGTXKIT_BENCH_QUEUE_JOBS ?? 50_000);
/** Interleaved rounds. */
const ROUNDS = Number(process.env.PGTXKIT_BENCH_QUEUE_ROUNDS ?? 3);
const PROCESSES = 2;
const CONCURRENCY = 8;

type System = 'txkit' | 'graphile' | 'pgboss' | 'raw';
interface Contender {
  readonly id: string;
  readonly name: string;
  readonly system: System;
  readonly config: string;
}

const CONTENDERS: readonly Contender[] = [
  { id: 'txkit-defaults', name: 'pg-txkit, worker defaults', system: 'txkit', config: 'defaults' },
  {
    id: 'txkit-tuned',
    name: 'pg-txkit, tuned (batch 500, prefetch 500, settleDelay 0)',
    system: 'txkit',
    config: 'tuned',
  },
  {
    id: 'txkit-groups-1000',
    name: 'pg-txkit, worker defaults, 1,000 groups × concurrency 1 (serial per key)',
    system: 'txkit',
    config: 'groups-1000',
  },
  {
    id: 'txkit-groups-4',
    name: 'pg-txkit, worker defaults, 4 groups × concurrency 250',
    system: 'txkit',
    config: 'groups-4',
  },
  {
    id: 'graphile',
    name: 'graphile-worker 0.17.3 (localQueue 500, completeJobBatchDelay 0, failJobBatchDelay 0)',
    system: 'graphile',
    config: 'best',
  },
  {
    id: 'graphile-queues-1000',
    name: 'graphile-worker 0.17.3, 1,000 named queues (serial per key; no localQueue, completeJobBatchDelay 0, failJobBatchDelay 0)',
    system: 'graphile',
    config: 'queues-1000',
  },
  {
    id: 'txkit-fresh',
    name: 'pg-txkit, worker defaults, a freshly migrated queue never ANALYZEd',
    system: 'txkit',
    config: 'fresh',
  },
  {
    id: 'txkit-held',
    name: 'pg-txkit, worker defaults, another session holding a snapshot',
    system: 'txkit',
    config: 'held-snapshot',
  },
  {
    id: 'graphile-fresh',
    name: 'graphile-worker 0.17.3 at its best, a freshly migrated queue never ANALYZEd',
    system: 'graphile',
    config: 'fresh',
  },
  {
    id: 'graphile-held',
    name: 'graphile-worker 0.17.3 at its best, another session holding a snapshot',
    system: 'graphile',
    config: 'held-snapshot',
  },
  {
    id: 'pgboss',
    name: 'pg-boss 10.4.2 (8 pollers × batchSize 100 per process)',
    system: 'pgboss',
    config: 'best',
  },
  {
    id: 'raw',
    name: 'hand-written SKIP LOCKED loop (claim 50, delete the batch; no lease, no safety)',
    system: 'raw',
    config: 'raw',
  },
];
const BASELINE = 'graphile';
/**
 * The unlimited queue of each system (ANALYZEd, nothing else on the server) its per-key limits, fresh
 * tables and held snapshots are compared with, round by round.
 */
const UNLIMITED: Partial<Record<System, string>> = { txkit: 'txkit-defaults', graphile: 'graphile' };

/** Configurations compared with their system's unlimited queue (see UNLIMITED). */
const comparedWithUnlimited = (config: string) =>
  groupCount(config) > 0 || config === 'fresh' || config === 'held-snapshot';

/** The child.mjs configuration of a contender: fresh and held-snapshot run the system's best one. */
const childConfig = (c: Contender) =>
  c.config === 'fresh' || c.config === 'held-snapshot'
    ? c.system === 'txkit'
      ? 'defaults'
      : 'best'
    : c.config;

/**
 * How many groups (pg-txkit, `groups-N`) or named queues (graphile-worker, `queues-N`) the jobs of a
 * configuration are spread over, round-robin; 0: none.
 */
function groupCount(config: string): number {
  const m = /^(?:groups|queues)-(\d+)$/.exec(config);
  return m === null ? 0 : Number(m[1]);
}

/** Enqueues JOBS no-op jobs into `system`'s own tables (not timed); returns a "some left" query. */
async function prepare(contender: Contender, url: string, pool: pg.Pool): Promise<string> {
  const { system } = contender;
  const specs = Array.from({ length: JOBS }, () => ({}));
  if (system === 'txkit') {
    const groups = groupCount(contender.config);
    await pool.query('DROP SCHEMA IF EXISTS bench_txkit CASCADE');
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'bench_txkit',
      tasks: { noop: z.object({}) },
    });
    (await queue.migrate())._unsafeUnwrap();
    for (const [c, chunk] of chunks(specs, 10_000).entries()) {
      const group = (i: number) => `g${(c * 10_000 + i) % groups}`;
      const options = groups === 0 ? {} : { groups: chunk.map((_, i) => group(i)) };
      (await queue.enqueueMany(pool, 'noop', chunk, options))._unsafeUnwrap();
    }
    if (contender.config !== 'fresh') await pool.query('VACUUM ANALYZE bench_txkit.jobs');
    return 'SELECT EXISTS (SELECT 1 FROM bench_txkit.jobs) AS left';
  }
  if (system === 'graphile') {
    const utils = await makeWorkerUtils({ connectionString: url });
    try {
      await utils.migrate();
      await pool.query('DELETE FROM graphile_worker._private_jobs');
      // The named queues of the last round go too: each fetch considers every queue row.
      await pool.query('DELETE FROM graphile_worker._private_job_queues');
      const queues = groupCount(contender.config);
      for (const [c, chunk] of chunks(specs, 5000).entries())
        await utils.addJobs(
          chunk.map((payload, i) =>
            queues === 0
              ? { identifier: 'noop', payload }
              : { identifier: 'noop', payload, queueName: `g${(c * 5000 + i) % queues}` },
          ),
        );
    } finally {
      await utils.release();
    }
    if (contender.config !== 'fresh') await pool.query('VACUUM ANALYZE graphile_worker._private_jobs');
    else {
      // Fresh: a queue table that was never analyzed, as migrate() leaves it (graphile-worker's tables
      // already exist: they are made again, empty).
      await pool.query('DROP SCHEMA graphile_worker CASCADE');
      const fresh = await makeWorkerUtils({ connectionString: url });
      try {
        await fresh.migrate();
        for (const chunk of chunks(specs, 5000))
          await fresh.addJobs(chunk.map((payload) => ({ identifier: 'noop', payload })));
      } finally {
        await fresh.release();
      }
    }
    return 'SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS left';
  }
  if (system === 'raw') {
    await pool.query('DROP SCHEMA IF EXISTS bench_raw CASCADE');
    await pool.query('CREATE SCHEMA bench_raw');
    await pool.query(
      'CREATE TABLE bench_raw.jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL, claimed boolean NOT NULL DEFAULT false)',
    );
    await pool.query('INSERT INTO bench_raw.jobs (payload) SELECT $1::jsonb FROM generate_series(1, $2)', [
      '{}',
      JOBS,
    ]);
    await pool.query('VACUUM ANALYZE bench_raw.jobs');
    return 'SELECT EXISTS (SELECT 1 FROM bench_raw.jobs) AS left';
  }
  const boss = new PgBoss({ connectionString: url, max: 4, supervise: false, schedule: false });
  boss.on('error', () => {});
  await boss.start();
  try {
    await pool.query(`DELETE FROM pgboss.job WHERE name = 'noop'`).catch(() => {});
    await boss.createQueue('noop');
    for (const chunk of chunks(specs, 5000)) await boss.insert(chunk.map((data) => ({ name: 'noop', data })));
  } finally {
    await boss.stop({ graceful: false, wait: true });
  }
  return `SELECT EXISTS (SELECT 1 FROM pgboss.job WHERE name = 'noop' AND state < 'completed') AS left`;
}

interface RoundResult {
  readonly jobsPerSec: number;
  /** The worker processes' CPU from 'go' to the end, per job: a fresh process's start included. */
  readonly workerCpuUsPerJob: number;
  /** The same from each process's BENCH_WARM_JOBS-th job on (see child.mjs): the cost per job of a warm worker. */
  readonly warmWorkerCpuUsPerJob: number;
  readonly serverCpuUsPerJob: number | undefined;
  /**
   * Sequential scans of the queue's table by the workers during the burn-down (pg_stat_all_tables.seq_scan,
   * less the progress polls', each a sequential scan of that table but pg-boss's).
   */
  readonly seqScans: number;
}

/** The queue's table of each system, whose sequential scans are counted. */
const QUEUE_TABLE: Record<System, string> = {
  txkit: 'bench_txkit.jobs',
  graphile: 'graphile_worker._private_jobs',
  pgboss: 'pgboss.job',
  raw: 'bench_raw.jobs',
};

/**
 * seq_scan of `table` (schema.name), as the backends have reported it so far; `client`'s own counts are
 * reported first (an idle backend reports them up to 10 s late).
 */
async function seqScans(client: pg.Client, table: string): Promise<number> {
  await client.query('SELECT pg_stat_force_next_flush()');
  await client.query('SELECT 1');
  const r = await client.query<{ n: string | null }>(
    `SELECT (SELECT seq_scan FROM pg_stat_all_tables WHERE relid = to_regclass($1)) AS n`,
    [table],
  );
  return Number(r.rows[0]?.n ?? 0);
}

/** What a worker process reports at 'stop' (see child.mjs). */
interface ChildCpu {
  readonly cpuUs: number;
  readonly jobs: number;
  readonly warmCpuUs: number;
  readonly warmJobs: number;
}

/** One burn-down: PROCESSES worker processes, timed from 'go' until the table holds no unfinished job. */
async function burnDown(
  contender: Contender,
  url: string,
  pool: pg.Pool,
  serverCpu: () => number | undefined,
  signal: AbortSignal,
): Promise<RoundResult> {
  const someLeft = await prepare(contender, url, pool);
  const children: ChildProcess[] = [];
  const exited: Promise<void>[] = [];
  let holder: pg.Client | undefined;
  // The progress polls and the scan counts, on one connection of their own.
  const poller = new pg.Client({ connectionString: url });
  poller.on('error', () => {});
  await poller.connect();
  let polls = 0;
  const cpu: Promise<ChildCpu>[] = [];
  let stopped = false;
  const stopAll = () => {
    if (stopped) return;
    stopped = true;
    for (const child of children) if (child.connected) child.send('stop');
  };
  try {
    for (let i = 0; i < PROCESSES; i++) {
      const child = fork(benchFile('child.mjs'), [], {
        env: {
          ...process.env,
          BENCH_SYSTEM: contender.system,
          BENCH_URL: url,
          BENCH_CONFIG: childConfig(contender),
          BENCH_CONCURRENCY: String(CONCURRENCY),
        },
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      });
      children.push(child);
      exited.push(new Promise((resolve) => child.once('exit', () => resolve())));
      await new Promise<void>((resolve, reject) => {
        child.once('message', () => resolve());
        child.once('exit', (code) =>
          reject(new Error(`${contender.name} worker exited (${code}) before ready`)),
        );
      });
      cpu.push(
        new Promise((resolve) => {
          child.on('message', (m: Partial<ChildCpu> | string) => {
            if (typeof m === 'object' && m !== null && typeof m.cpuUs === 'number')
              resolve({
                cpuUs: m.cpuUs,
                jobs: m.jobs ?? 0,
                warmCpuUs: m.warmCpuUs ?? 0,
                warmJobs: m.warmJobs ?? 0,
              });
          });
          child.once('exit', () => resolve({ cpuUs: Number.NaN, jobs: 0, warmCpuUs: 0, warmJobs: 0 }));
        }),
      );
    }
    if (contender.config === 'held-snapshot') {
      holder = new pg.Client({ connectionString: url });
      holder.on('error', () => {});
      await holder.connect();
      // The snapshot is taken by the first statement and kept until COMMIT.
      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await holder.query('SELECT 1');
    }
    const scans0 = await seqScans(poller, QUEUE_TABLE[contender.system]);
    const server0 = serverCpu();
    const t0 = performance.now();
    for (const child of children) child.send('go');
    const limit = t0 + 300_000;
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      const r = await poller.query<{ left: boolean }>(someLeft);
      polls++;
      if (r.rows[0]?.left !== true) break;
      if (signal.aborted || performance.now() > limit) throw new Error(`${contender.name}: jobs left`);
    }
    const seconds = (performance.now() - t0) / 1000;
    const server1 = serverCpu();
    stopAll();
    await holder?.query('COMMIT').catch(() => {});
    const cpus = await Promise.all(cpu);
    // The worker backends report their counts as they exit.
    await Promise.all(exited);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const scans =
      (await seqScans(poller, QUEUE_TABLE[contender.system])) -
      scans0 -
      (contender.system === 'pgboss' ? 0 : polls);
    // Not timed: vacuum this contender's tables now rather than during the next contender's run.
    await pool.query('VACUUM').catch(() => {});
    const sum = (f: (c: ChildCpu) => number) => cpus.reduce((a, c) => a + f(c), 0);
    const warmJobs = sum((c) => c.warmJobs);
    return {
      jobsPerSec: JOBS / seconds,
      workerCpuUsPerJob: sum((c) => c.cpuUs) / JOBS,
      warmWorkerCpuUsPerJob: warmJobs > 0 ? sum((c) => c.warmCpuUs) / warmJobs : Number.NaN,
      serverCpuUsPerJob:
        server0 === undefined || server1 === undefined ? undefined : (server1 - server0) / JOBS,
      seqScans: scans,
    };
  } finally {
    stopAll();
    await holder?.end().catch(() => {});
    await poller.end().catch(() => {});
    const killer = setTimeout(() => {
      for (const child of children) child.kill('SIGKILL');
    }, 15_000);
    await Promise.all(exited);
    clearTimeout(killer);
  }
}

/** pg-txkit, worker defaults + LISTEN: enqueue → handler start at 100 jobs/s for 5 s. */
async function latencyAt100PerSec(pool: pg.Pool): Promise<{ p50: number; p99: number; max: number }> {
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: 'bench_latency',
    tasks: { noop: z.object({ i: z.number() }) },
  });
  await pool.query('DROP SCHEMA IF EXISTS bench_latency CASCADE');
  (await queue.migrate())._unsafeUnwrap();
  const started = new Map<number, number>();
  const worker = queue.work(
    {
      noop: (job) => {
        started.set(job.payload.i, performance.now());
      },
    },
    { concurrency: CONCURRENCY },
  );
  for (let i = 0; i < 250 && !worker.listening; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  const enqueuedAt = new Map<number, number>();
  const t0 = performance.now();
  for (let i = 0; i < 500; i++) {
    const due = t0 + i * 10;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    enqueuedAt.set(i, performance.now());
    (await queue.enqueue(pool, 'noop', { i }))._unsafeUnwrap();
  }
  for (let i = 0; i < 250 && started.size < 500; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  await worker.stop();
  const latencies = [...enqueuedAt].map(([i, at]) => (started.get(i) ?? Number.POSITIVE_INFINITY) - at);
  return { p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), max: quantile(latencies, 1) };
}

/** The queue benchmark (npm run bench). */
export const run: BenchModule['run'] = async ({ url, onProgress, signal }) => {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  try {
    const only = process.env.PGTXKIT_BENCH_QUEUE_ONLY?.split(',');
    const contenders = CONTENDERS.filter(
      (c) => only === undefined || only.includes(c.id) || c.id === BASELINE,
    );
    const serverCpu = await (await loadServerCpuReader())(pool);
    const results = new Map<string, RoundResult[]>(contenders.map((c) => [c.id, []]));
    const ratios = new Map<string, number[]>(contenders.map((c) => [c.id, []]));
    /** pg-txkit defaults ÷ tuned, per round (both measured in the same round). */
    const defaultsVsTuned: number[] = [];
    /** Each per-key-limit configuration ÷ the unlimited queue, per round. */
    const limitedVsUnlimited = new Map<string, number[]>();
    const load0 = loadavg()[0] ?? 0;
    // Latency first, on a server with nothing else to do: after the rounds, autovacuum is still cleaning
    // the hundreds of thousands of dead rows they left in every contender's tables, and that measured
    // the machine's load instead of the queue (p99 27–38 ms there against 6–12 ms on the same build
    // alone, or beside two busy CPU loops).
    const latency = await latencyAt100PerSec(pool);
    const total = ROUNDS * contenders.length;
    for (let round = 0; round < ROUNDS; round++) {
      const inRound = new Map<string, number>();
      // The order rotates each round, so that no contender always runs right after the same one (whose
      // dead tuples autovacuum may be cleaning meanwhile).
      const order = contenders.map((_, i) => contenders[(i + round) % contenders.length] as Contender);
      for (const [index, contender] of order.entries()) {
        onProgress(round * contenders.length + index, total);
        const r = await burnDown(contender, url, pool, serverCpu, signal);
        results.get(contender.id)?.push(r);
        inRound.set(contender.id, r.jobsPerSec);
      }
      const base = inRound.get(BASELINE) ?? Number.NaN;
      for (const [id, v] of inRound) ratios.get(id)?.push(v / base);
      const defaults = inRound.get('txkit-defaults');
      const tuned = inRound.get('txkit-tuned');
      if (defaults !== undefined && tuned !== undefined) defaultsVsTuned.push(defaults / tuned);
      for (const c of contenders.filter((x) => comparedWithUnlimited(x.config))) {
        const limited = inRound.get(c.id);
        const unlimited = inRound.get(UNLIMITED[c.system] ?? '');
        if (limited === undefined || unlimited === undefined) continue;
        limitedVsUnlimited.set(c.id, [...(limitedVsUnlimited.get(c.id) ?? []), limited / unlimited]);
      }
    }
    onProgress(total, total);
    const load1 = loadavg()[0] ?? 0;
    const lines = [
      `| contender | jobs/s median (min–max) | vs graphile-worker, same round: median (min–max) | worker CPU µs/job: whole run / warm | server CPU µs/job | sequential scans of the queue's table |`,
      '|---|---:|---:|---:|---:|---:|',
    ];
    const rows: { name: string; opsPerSec: number; ratio: number }[] = [];
    for (const c of contenders) {
      const rs = results.get(c.id) ?? [];
      const jps = rs.map((r) => r.jobsPerSec);
      const rt = ratios.get(c.id) ?? [];
      const ratio = median(rt);
      rows.push({ name: c.name, opsPerSec: Math.round(median(jps)), ratio: Math.round(ratio * 100) / 100 });
      lines.push(
        `| ${c.name} | ${fmt(median(jps))} (${fmt(Math.min(...jps))}–${fmt(Math.max(...jps))}) | ` +
          `${fmt(ratio, 2)}× (${fmt(Math.min(...rt), 2)}–${fmt(Math.max(...rt), 2)}) | ` +
          `${fmt(median(rs.map((r) => r.workerCpuUsPerJob)), 1)} / ${fmt(median(rs.map((r) => r.warmWorkerCpuUsPerJob)), 1)} | ` +
          `${fmt(median(rs.map((r) => r.serverCpuUsPerJob ?? Number.NaN)), 1)} | ${rs.map((r) => r.seqScans).join(', ')} |`,
      );
    }
    const notes =
      `burn-down of ${JOBS} no-op jobs, ${PROCESSES} worker processes × concurrency ${CONCURRENCY}, same server, ` +
      `${ROUNDS} interleaved rounds; load average ${load0.toFixed(2)} → ${load1.toFixed(2)}; ` +
      (defaultsVsTuned.length > 0
        ? `pg-txkit defaults ÷ tuned, same round: ${fmt(median(defaultsVsTuned), 2)}× ` +
          `(${fmt(Math.min(...defaultsVsTuned), 2)}–${fmt(Math.max(...defaultsVsTuned), 2)}); `
        : '') +
      [...limitedVsUnlimited]
        .map(
          ([id, r]) =>
            `${id} ÷ ${UNLIMITED[CONTENDERS.find((c) => c.id === id)?.system ?? 'raw']}, same round: ${fmt(median(r), 2)}× (${fmt(Math.min(...r), 2)}–${fmt(Math.max(...r), 2)}); `,
        )
        .join('') +
      `pg-txkit defaults + LISTEN at 100 jobs/s, enqueue → handler start: p50 ${latency.p50.toFixed(2)} ms, ` +
      `p99 ${latency.p99.toFixed(2)} ms, max ${latency.max.toFixed(2)} ms`;
    process.stdout.write(`${lines.join('\n')}\n\n${notes}\n`);
    return {
      name: 'queue',
      baseline: CONTENDERS.find((c) => c.id === BASELINE)?.name ?? BASELINE,
      rows,
      notes,
    };
  } finally {
    await pool.end();
  }
};

// Standalone: node dist-bench/bench/queue.js (starts the embedded PostgreSQL unless DATABASE_URL is set).
await runStandalone(import.meta.url, run, {});
