// Whether completions wait for each other: two workers in one process (`work()` defaults, concurrency
// 8 each, no-op handlers) burn down 50,000 grouped jobs while another connection samples
// pg_stat_activity about every millisecond. Reported per build and group count, over interleaved rounds:
// jobs/s, and the share of the samples of a completion in flight (the statement that completes a batch
// and takes over the freed group slots) in which it was waiting for another transaction's row lock
// (wait event Lock:transactionid).
// With few groups both workers take over from the same first ready jobs of a group. When the lookup for
// them ran in the snapshot of a statement that first deleted the completed jobs, a job the other worker
// had just taken over still looked ready; FOR UPDATE SKIP LOCKED followed the committed update to the
// newest version, locked it and only then found it no longer pending, and that lock, held until the
// statement ended, made the other worker's completion of the job wait.
// PGTXKIT_WAITS_BASE=<another build's root> runs that build too, in the same rounds.
// Run: npm run build && node bench/queue/completion-waits.mjs  (PGTXKIT_WAITS_ROUNDS, PGTXKIT_WAITS_GROUPS=4,1000)
import pg from 'pg';
import { z } from 'zod';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_WAITS_ROUNDS ?? 3);
const GROUPS = (process.env.PGTXKIT_WAITS_GROUPS ?? '4,1000').split(',').map(Number);
const JOBS = 50_000;
const builds = [['this build', '../../dist/index.js']];
if (process.env.PGTXKIT_WAITS_BASE !== undefined)
  builds.push(['base', `${process.env.PGTXKIT_WAITS_BASE}/dist/index.js`]);
const server = await startPostgres();
const results = new Map();

/** One burn-down of `groups` groups (serial when 1,000 or more, else concurrency 250 each). */
async function burnDown(modulePath, groups) {
  const { Queue, TxManager } = await import(modulePath);
  const db = await createTestDatabase(server.url, { prefix: 'waits' });
  const pools = [0, 1, 2].map(() => new pg.Pool({ connectionString: db.url }));
  const [admin, ...workerPools] = pools;
  let sampling = true;
  try {
    const concurrency = groups >= 1000 ? 1 : 250;
    const queues = workerPools.map(
      (pool) =>
        new Queue({
          pool,
          txManager: new TxManager(pool),
          tasks: { noop: z.object({}) },
          groups: { default: { concurrency } },
        }),
    );
    (await queues[0].migrate())._unsafeUnwrap();
    for (let done = 0; done < JOBS; done += 10_000) {
      const chunk = Array.from({ length: 10_000 }, () => ({}));
      const keys = chunk.map((_, i) => `g${(done + i) % groups}`);
      (await queues[0].enqueueMany(admin, 'noop', chunk, { groups: keys }))._unsafeUnwrap();
    }
    await admin.query('VACUUM ANALYZE pgtxkit_queue.jobs');
    const samples = { completing: 0, waiting: 0 };
    const sampler = (async () => {
      const c = await admin.connect();
      try {
        while (sampling) {
          const r = await c.query(
            `SELECT wait_event_type = 'Lock' AND wait_event = 'transactionid' AS waiting FROM pg_stat_activity
              WHERE state = 'active' AND pid <> pg_backend_pid()
                AND (query LIKE '%complete_take_next%' OR query LIKE '%budget AS MATERIALIZED%')`,
          );
          for (const row of r.rows) {
            samples.completing++;
            if (row.waiting) samples.waiting++;
          }
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
      } finally {
        c.release();
      }
    })();
    let ran = 0;
    let finished;
    const all = new Promise((resolve) => (finished = resolve));
    const handlers = { noop: () => void (++ran === JOBS && finished()) };
    const t0 = performance.now();
    const workers = queues.map((q) => q.work(handlers, { concurrency: 8 }));
    await all;
    const seconds = (performance.now() - t0) / 1000;
    sampling = false;
    await sampler;
    await Promise.all(workers.map((w) => w.stop()));
    return {
      jobsPerSec: JOBS / seconds,
      waitShare: samples.completing === 0 ? 0 : samples.waiting / samples.completing,
    };
  } finally {
    sampling = false;
    await Promise.all(pools.map((p) => p.end()));
    await db.drop();
  }
}

try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const groups of GROUPS) {
      const order = round % 2 === 0 ? builds : [...builds].reverse();
      for (const [name, path] of order) {
        const r = await burnDown(path, groups);
        const key = `${name}|${groups}`;
        const acc = results.get(key) ?? { rate: [], waits: [] };
        acc.rate.push(r.jobsPerSec);
        acc.waits.push(r.waitShare * 100);
        results.set(key, acc);
        process.stderr.write(
          `round ${round + 1} ${name}, ${groups} groups: ${r.jobsPerSec.toFixed(0)} jobs/s, ${(r.waitShare * 100).toFixed(1)}% waiting\n`,
        );
      }
    }
  }
  console.log(
    `${JOBS} grouped no-op jobs, 2 workers × concurrency 8 in one process, ${ROUNDS} interleaved rounds`,
  );
  console.log('| build | groups | jobs/s | completions waiting for a row lock, % of samples |');
  console.log('|---|---:|---:|---:|');
  for (const [key, r] of results) {
    const [name, groups] = key.split('|');
    console.log(`| ${name} | ${groups} | ${span(r.rate, 0)} | ${span(r.waits)} |`);
  }
} finally {
  await server.stop();
}
