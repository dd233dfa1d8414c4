// Queue benchmark: burn-down of 50,000 no-op jobs by 2 worker processes x 8 concurrency, side by side
// against the same server: pg-txkit (batching on/off), graphile-worker (batching on: localQueue +
// completeJobBatchDelay; off), pg-boss (batchSize 64). Plus pg-txkit enqueueMany throughput and
// enqueue → handler start latency (p50/p99) with LISTEN. Worker processes run bench/queue/child.mjs,
// which loads pg-txkit from dist/ (`npm run build` first).
import { type ChildProcess, fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { makeWorkerUtils } from 'graphile-worker';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { z } from 'zod';
import { Queue } from '../src/patterns/queue/index.js';
import { TxManager } from '../src/tx/tx-manager.js';

/** Jobs per burn-down (PGTXKIT_BENCH_QUEUE_JOBS overrides). */
const JOBS = Number(process.env.PGTXKIT_BENCH_QUEUE_JOBS ?? 50_000);
const PROCESSES = 2;
const CONCURRENCY = 8;

interface Contender {
  readonly name: string;
  readonly system: 'txkit' | 'graphile' | 'pgboss';
  readonly batch: boolean | 'default';
}

const CONTENDERS: readonly Contender[] = [
  { name: 'pg-txkit (batching on)', system: 'txkit', batch: true },
  { name: 'pg-txkit (defaults: claim for free slots, batched settles)', system: 'txkit', batch: 'default' },
  { name: 'pg-txkit (batching off)', system: 'txkit', batch: false },
  { name: 'graphile-worker (batching on)', system: 'graphile', batch: true },
  { name: 'graphile-worker (batching off)', system: 'graphile', batch: false },
  { name: 'pg-boss (batchSize 64)', system: 'pgboss', batch: true },
];
const BASELINE = 'graphile-worker (batching on)';

function childScript(): string {
  for (const candidate of ['./queue/child.mjs', '../../bench/queue/child.mjs']) {
    const path = fileURLToPath(new URL(candidate, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error('bench/queue/child.mjs not found');
}

/** Enqueues JOBS no-op jobs into `system`'s own tables (not timed) and returns a "remaining" query. */
async function prepare(system: Contender['system'], url: string, pool: pg.Pool): Promise<string> {
  const specs = Array.from({ length: JOBS }, () => ({}));
  const chunks = <T>(items: T[], size: number) =>
    Array.from({ length: Math.ceil(items.length / size) }, (_, i) => items.slice(i * size, (i + 1) * size));
  if (system === 'txkit') {
    await pool.query('DROP SCHEMA IF EXISTS bench_txkit CASCADE');
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'bench_txkit',
      tasks: { noop: z.object({}) },
    });
    (await queue.migrate())._unsafeUnwrap();
    for (const chunk of chunks(specs, 10_000)) (await queue.enqueueMany(pool, 'noop', chunk))._unsafeUnwrap();
    return 'SELECT count(*)::int AS n FROM bench_txkit.jobs';
  }
  if (system === 'graphile') {
    const utils = await makeWorkerUtils({ connectionString: url });
    try {
      await utils.migrate();
      await pool.query('DELETE FROM graphile_worker._private_jobs');
      for (const chunk of chunks(specs, 5000))
        await utils.addJobs(chunk.map((payload) => ({ identifier: 'noop', payload })));
    } finally {
      await utils.release();
    }
    return 'SELECT count(*)::int AS n FROM graphile_worker._private_jobs';
  }
  const boss = new PgBoss({ connectionString: url, max: 4, supervise: false, schedule: false });
  boss.on('error', () => {});
  await boss.start();
  try {
    await boss.createQueue('noop');
    for (const chunk of chunks(specs, 5000)) await boss.insert(chunk.map((data) => ({ name: 'noop', data })));
  } finally {
    await boss.stop({ graceful: false, wait: true });
  }
  return `SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'noop' AND state IN ('created', 'retry', 'active')`;
}

/** Starts PROCESSES worker processes, waits until each is ready, runs the burn-down, stops them. */
async function burnDown(
  contender: Contender,
  url: string,
  pool: pg.Pool,
  onProgress: (done: number) => void,
  signal: AbortSignal,
): Promise<number> {
  const remaining = await prepare(contender.system, url, pool);
  const children: ChildProcess[] = [];
  const exited: Promise<void>[] = [];
  try {
    for (let i = 0; i < PROCESSES; i++) {
      const child = fork(childScript(), [], {
        env: {
          ...process.env,
          BENCH_SYSTEM: contender.system,
          BENCH_URL: url,
          BENCH_BATCH: contender.batch === 'default' ? 'default' : contender.batch ? '1' : '0',
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
    }
    const t0 = performance.now();
    for (const child of children) child.send('go');
    const limit = t0 + 300_000;
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      const r = await pool.query<{ n: number }>(remaining);
      const left = r.rows[0]?.n ?? 0;
      onProgress(JOBS - left);
      if (left === 0) break;
      if (signal.aborted || performance.now() > limit)
        throw new Error(`${contender.name}: ${left} jobs left`);
    }
    return JOBS / ((performance.now() - t0) / 1000);
  } finally {
    for (const child of children) if (child.connected) child.send('stop');
    const killer = setTimeout(() => {
      for (const child of children) child.kill('SIGKILL');
    }, 15_000);
    await Promise.all(exited);
    clearTimeout(killer);
  }
}

/** pg-txkit enqueueMany throughput (jobs/s) in batches of 5,000, and LISTEN wake-up latency. */
async function enqueueAndLatency(
  pool: pg.Pool,
): Promise<{ enqueuePerSec: number; p50: number; p99: number }> {
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: 'bench_latency',
    tasks: { noop: z.object({ i: z.number() }) },
  });
  await pool.query('DROP SCHEMA IF EXISTS bench_latency CASCADE');
  (await queue.migrate())._unsafeUnwrap();
  const t0 = performance.now();
  for (let i = 0; i < 10; i++) {
    (
      await queue.enqueueMany(
        pool,
        'noop',
        Array.from({ length: 5000 }, (_, n) => ({ i: n })),
      )
    )._unsafeUnwrap();
  }
  const enqueuePerSec = 50_000 / ((performance.now() - t0) / 1000);
  await pool.query('TRUNCATE bench_latency.jobs');
  const started = new Map<number, number>();
  let wake: (() => void) | undefined;
  const worker = queue.work(
    {
      noop: (job) => {
        started.set(job.payload.i, performance.now());
        wake?.();
      },
    },
    { concurrency: CONCURRENCY, listen: true, pollInterval: 60_000 },
  );
  for (let i = 0; i < 100 && !worker.listening; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  const latencies: number[] = [];
  for (let i = 0; i < 300; i++) {
    const seen = new Promise<void>((resolve) => {
      wake = resolve;
    });
    const at = performance.now();
    (await queue.enqueue(pool, 'noop', { i }))._unsafeUnwrap();
    await Promise.race([seen, new Promise((resolve) => setTimeout(resolve, 5000))]);
    latencies.push((started.get(i) ?? Number.NaN) - at);
  }
  await worker.stop();
  latencies.sort((a, b) => a - b);
  const pick = (q: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? Number.NaN;
  return { enqueuePerSec, p50: pick(0.5), p99: pick(0.99) };
}

/** The queue benchmark (npm run bench). */
export async function run({
  url,
  onProgress,
  signal = new AbortController().signal,
}: {
  url: string;
  durationMs: number;
  onProgress(done: number, total: number): void;
  signal?: AbortSignal;
}): Promise<{
  name: string;
  baseline: string;
  rows: { name: string; opsPerSec: number; ratio: number }[];
  notes: string;
}> {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  try {
    const measured: { name: string; opsPerSec: number }[] = [];
    // PGTXKIT_BENCH_QUEUE_ONLY=txkit,graphile runs a subset (by system).
    const only = process.env.PGTXKIT_BENCH_QUEUE_ONLY?.split(',');
    const contenders = CONTENDERS.filter((c) => only === undefined || only.includes(c.system));
    const total = JOBS * contenders.length;
    for (const [index, contender] of contenders.entries()) {
      const opsPerSec = await burnDown(
        contender,
        url,
        pool,
        (done) => onProgress(index * JOBS + done, total),
        signal,
      );
      measured.push({ name: contender.name, opsPerSec: Math.round(opsPerSec) });
    }
    const latency = await enqueueAndLatency(pool);
    const base = measured.find((m) => m.name === BASELINE)?.opsPerSec ?? 1;
    return {
      name: 'queue',
      baseline: BASELINE,
      rows: measured.map((m) => ({ ...m, ratio: Math.round((m.opsPerSec / base) * 100) / 100 })),
      notes:
        `burn-down of ${JOBS} no-op jobs, ${PROCESSES} worker processes x ${CONCURRENCY} concurrency, same server; ` +
        `pg-txkit enqueueMany ${Math.round(latency.enqueuePerSec)} jobs/s (batches of 5,000); ` +
        `enqueue → handler start with LISTEN: p50 ${latency.p50.toFixed(2)} ms, p99 ${latency.p99.toFixed(2)} ms`,
    };
  } finally {
    await pool.end();
  }
}
