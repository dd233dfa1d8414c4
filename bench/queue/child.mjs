// Worker process for bench/queue.ts: one queue system in one configuration, `BENCH_CONCURRENCY` no-op
// handlers. Protocol (IPC): sends 'ready' once set up; starts working on 'go'; on 'stop' sends
// { cpuUs, jobs, warmCpuUs, warmJobs }: its own CPU time (user + system) since 'go' and the jobs its
// handlers ran, and the same counted from its BENCH_WARM_JOBS-th job on (default 5,000), once the process
// is warm: the JIT has compiled its hot paths, its pool is connected (each connection's SCRAM handshake
// costs milliseconds of CPU) and its batch sizes have grown. A worker lives for hours, so the warm figure
// is its cost per job; the first one also counts a fresh process's start. Then it stops and exits.
// BENCH_LATENCY=1 (bench/queue-steady.ts): each job's payload carries `t`, its enqueue time (ms since the
// epoch, performance.timeOrigin + performance.now() in the producer), and the reply to 'stop' adds
// `enqueuedAt` and `startedAt`: for every job run, that time and the handler's start on the same clock.
// pg-txkit is loaded from the built package (dist/); run `npm run build` first.
const { BENCH_SYSTEM: system, BENCH_URL: url, BENCH_CONFIG: config } = process.env;
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 8);
const warmAfter = Number(process.env.BENCH_WARM_JOBS ?? 5000);
let stop = async () => {};
let start = async () => {};
/** Jobs the handlers ran since 'go', and the CPU time and job count when the warmAfter-th one ran. */
let jobs = 0;
let cpuAtWarm;
let jobsAtWarm = 0;
const latency = process.env.BENCH_LATENCY === '1';
/** With BENCH_LATENCY: the enqueue time of each job run, and when its handler started (same clock). */
const enqueuedAt = [];
const startedAt = [];
/** Notes a handler's start for the job enqueued at `t` (the payload's field, when there is one). */
const started = (t) => {
  if (latency && typeof t === 'number') {
    enqueuedAt.push(t);
    startedAt.push(performance.timeOrigin + performance.now());
  }
};
/** Counts `n` jobs run (called by every contender's handler). */
const ran = (n) => {
  const before = jobs;
  jobs += n;
  if (before < warmAfter && jobs >= warmAfter) {
    cpuAtWarm = process.cpuUsage();
    jobsAtWarm = jobs;
  }
};

if (system === 'txkit') {
  const pg = (await import('pg')).default;
  const { z } = await import('zod');
  // BENCH_DIST: another build to load instead (bench/queue/worker-cpu.mjs compares two builds).
  const { Queue, TxManager } = await import(process.env.BENCH_DIST ?? '../../dist/index.js');
  // The README's setup: a pool of pg's default size.
  const pool = new pg.Pool({ connectionString: url });
  // groups-N: the jobs are spread over N groups (bench/queue.ts); 1,000 groups are serial (concurrency
  // 1), fewer groups share the 16 handlers with a big limit each.
  const groups = /^groups-(\d+)$/.exec(config ?? '');
  const limit = groups === null ? undefined : Number(groups[1]) >= 1000 ? 1 : 250;
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: 'bench_txkit',
    tasks: { noop: latency ? z.object({ t: z.number() }) : z.object({}) },
    ...(limit === undefined ? {} : { groups: { default: { concurrency: limit } } }),
  });
  let worker;
  start = async () => {
    worker = queue.work(
      {
        noop: (job) => {
          started(job.payload.t);
          ran(1);
        },
      },
      // defaults: nothing but the concurrency. tuned: the best fixed configuration found by hand
      // (claims of 500, a fixed local queue of 500, settles written at once).
      config === 'tuned'
        ? { concurrency, batch: 500, prefetch: 500, batchSettles: true, settleDelay: 0 }
        : { concurrency },
    );
  };
  stop = async () => {
    await worker?.stop();
    await pool.end();
  };
} else if (system === 'graphile') {
  const { run } = await import('graphile-worker');
  let runner;
  start = async () => {
    runner = await run({
      connectionString: url,
      concurrency,
      noHandleSignals: true,
      pollInterval: 1000,
      taskList: {
        noop: async (payload) => {
          started(payload?.t);
          ran(1);
        },
      },
      // Its best configuration: a local queue of 500 and batched completions/failures with no delay.
      // With named queues (queues-N), no local queue: in 0.17.3 a batch fetch can take several jobs of
      // one named queue and run them at once (graphile/worker#621), so its serial-per-queue guarantee
      // holds only with jobs fetched one at a time.
      preset: {
        worker: {
          ...(config === 'best' ? { localQueue: { size: 500 } } : {}),
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        },
      },
    });
  };
  stop = async () => {
    await runner?.stop();
  };
} else if (system === 'pgboss') {
  const PgBoss = (await import('pg-boss')).default;
  const boss = new PgBoss({
    connectionString: url,
    max: concurrency + 2,
    supervise: false,
    schedule: false,
    migrate: false,
  });
  boss.on('error', () => {});
  await boss.start();
  start = async () => {
    // pg-boss 10 has no teamSize: `concurrency` pollers, each fetching a batch of 100 and completing it
    // in one call (its documented way to raise throughput), polling every 0.5 s (its minimum).
    for (let i = 0; i < concurrency; i++) {
      await boss.work('noop', { batchSize: 100, pollingIntervalSeconds: 0.5 }, async (batch) =>
        ran(batch.length),
      );
    }
  };
  stop = async () => {
    await boss.stop({ graceful: true, wait: true, timeout: 5000 });
  };
} else if (system === 'raw') {
  // The ceiling: a minimal hand-written SKIP LOCKED loop with no lease, no token, no retry, no NOTIFY.
  const pg = (await import('pg')).default;
  const pool = new pg.Pool({ connectionString: url, max: concurrency });
  pool.on('error', () => {});
  let running = false;
  const loops = [];
  const loop = async () => {
    while (running) {
      // FOR UPDATE SKIP LOCKED on 50 unclaimed rows, marked claimed in the same statement.
      const claimed = await pool.query(
        `UPDATE bench_raw.jobs SET claimed = true WHERE id IN (
           SELECT id FROM bench_raw.jobs WHERE NOT claimed ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED)
         RETURNING id, payload`,
      );
      if (claimed.rows.length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      // no-op handler
      ran(claimed.rows.length);
      await pool.query('DELETE FROM bench_raw.jobs WHERE id = ANY($1::bigint[])', [
        claimed.rows.map((r) => r.id),
      ]);
    }
  };
  start = async () => {
    running = true;
    for (let i = 0; i < concurrency; i++) loops.push(loop());
  };
  stop = async () => {
    running = false;
    await Promise.all(loops);
    await pool.end();
  };
} else {
  throw new Error(`unknown BENCH_SYSTEM ${system}`);
}

// BENCH_PROF=<file>: a CPU profile of the measured part only (from 'go' to 'stop'), written to that file.
const profiler =
  process.env.BENCH_PROF === undefined ? undefined : new (await import('node:inspector/promises')).Session();
let cpuAtGo;
process.on('message', async (message) => {
  if (message === 'go') {
    if (profiler !== undefined) {
      profiler.connect();
      await profiler.post('Profiler.enable');
      await profiler.post('Profiler.start');
    }
    cpuAtGo = process.cpuUsage();
    void start().catch((e) => process.stderr.write(`start failed: ${e}\n`));
  }
  if (message === 'stop' && cpuAtGo !== undefined) {
    const since = cpuAtGo;
    cpuAtGo = undefined;
    const cpu = process.cpuUsage(since);
    if (profiler !== undefined) {
      const { profile } = await profiler.post('Profiler.stop');
      (await import('node:fs')).writeFileSync(process.env.BENCH_PROF, JSON.stringify(profile));
    }
    const warm = cpuAtWarm === undefined ? undefined : process.cpuUsage(cpuAtWarm);
    // Sent before the process exits: a big report (the latencies) is still being written when send returns.
    const sent = new Promise((resolve) =>
      process.send === undefined
        ? resolve()
        : process.send(
            {
              cpuUs: cpu.user + cpu.system,
              jobs,
              warmCpuUs: warm === undefined ? 0 : warm.user + warm.system,
              warmJobs: warm === undefined ? 0 : jobs - jobsAtWarm,
              ...(latency ? { enqueuedAt, startedAt } : {}),
            },
            resolve,
          ),
    );
    void Promise.all([sent, stop()])
      .catch((e) => process.stderr.write(`stop failed: ${e}\n`))
      .finally(() => process.exit(0));
  }
});
process.send?.('ready');
