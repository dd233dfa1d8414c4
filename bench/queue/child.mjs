// Worker process for bench/queue.ts: one queue system, one mode, `CONCURRENCY` no-op handlers.
// Protocol (IPC): sends 'ready' once set up; starts working on 'go'; stops and exits on 'stop'.
// pg-txkit is loaded from the built package (dist/); run `npm run build` first.
const { BENCH_SYSTEM: system, BENCH_URL: url, BENCH_BATCH: batch } = process.env;
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 8);
const batching = batch === '1';
let stop = async () => {};
let start = async () => {};

if (system === 'txkit') {
  const pg = (await import('pg')).default;
  const { z } = await import('zod');
  const { Queue, TxManager } = await import('../../dist/index.js');
  const pool = new pg.Pool({ connectionString: url, max: concurrency + 2 });
  pool.on('error', () => {});
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: 'bench_txkit',
    tasks: { noop: z.object({}) },
  });
  let worker;
  start = async () => {
    worker = queue.work(
      { noop: () => {} },
      // on: claims of up to 64 jobs per statement (8 slots + a prefetch buffer of 56, like graphile's
      // localQueue of 64) + settles batched for 2 ms into one statement;
      // default: the worker's defaults (claims for free slots only, batched settles);
      // off: one job per claim, one statement per completion.
      batch === 'default'
        ? { concurrency }
        : batching
          ? {
              concurrency,
              batch: 64,
              prefetch: 64 - concurrency,
              batchSettles: true,
              settleDelay: 2,
              reapInterval: 0,
            }
          : { concurrency, batch: 1, batchSettles: false, reapInterval: 0 },
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
      taskList: { noop: async () => {} },
      preset: {
        worker: batching
          ? { localQueue: { size: 64 }, completeJobBatchDelay: 2, failJobBatchDelay: 2 }
          : { completeJobBatchDelay: -1, failJobBatchDelay: -1 },
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
    // pg-boss v10 has no teamSize: `concurrency` pollers, each fetching (and completing) batches of 64.
    for (let i = 0; i < concurrency; i++) {
      await boss.work('noop', { batchSize: 64, pollingIntervalSeconds: 0.5 }, async () => {});
    }
  };
  stop = async () => {
    await boss.stop({ graceful: true, wait: true, timeout: 5000 });
  };
} else {
  throw new Error(`unknown BENCH_SYSTEM ${system}`);
}

process.on('message', (message) => {
  if (message === 'go') void start().catch((e) => process.stderr.write(`start failed: ${e}\n`));
  if (message === 'stop') {
    void stop()
      .catch((e) => process.stderr.write(`stop failed: ${e}\n`))
      .finally(() => process.exit(0));
  }
});
process.send?.('ready');
