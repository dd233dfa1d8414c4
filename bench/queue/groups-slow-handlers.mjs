// Per-key limits with handlers that take time (an HTTP call, a query): two workers in one process
// (`work()` defaults, concurrency 8 each) burn down serial groups whose handlers wait WAIT ms. What
// this measures is not the database's cost but where the group slots sit: a job held in one worker's
// local queue occupies its group's slot, so a worker that holds more jobs than its handlers can start
// keeps the other worker's handlers idle. The bound is min(groups, 16 handlers) × 1000 / WAIT jobs/s.
// Reports jobs/s ÷ that bound and how the jobs split between the two workers, per scenario, with
// interleaved rounds; PGTXKIT_SLOW_BASE=<another build's root> runs that build too, in the same rounds.
// Run: npm run build && node bench/queue/groups-slow-handlers.mjs  (PGTXKIT_SLOW_ROUNDS)
import pg from 'pg';
import { z } from 'zod';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { median, span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_SLOW_ROUNDS ?? 3);
const builds = [['this build', '../../dist/index.js']];
if (process.env.PGTXKIT_SLOW_BASE !== undefined)
  builds.push(['base', `${process.env.PGTXKIT_SLOW_BASE}/dist/index.js`]);
// [groups, handler wait ms, jobs]
const SCENARIOS = [
  [10, 20, 1000],
  [100, 20, 3000],
  [1000, 5, 10000],
];
const server = await startPostgres();
const results = new Map();

/** One burn-down: jobs/s and the share of the jobs the busier worker ran. */
async function burnDown(modulePath, [groups, wait, jobs]) {
  const { Queue, TxManager } = await import(modulePath);
  const db = await createTestDatabase(server.url, { prefix: 'slow' });
  const pools = [new pg.Pool({ connectionString: db.url }), new pg.Pool({ connectionString: db.url })];
  try {
    const queues = pools.map(
      (pool) =>
        new Queue({
          pool,
          txManager: new TxManager(pool),
          tasks: { call: z.object({ n: z.number() }) },
          groups: { default: { concurrency: 1 } },
        }),
    );
    (await queues[0].migrate())._unsafeUnwrap();
    const payloads = Array.from({ length: jobs }, (_, n) => ({ n }));
    const keys = payloads.map((p) => `g${p.n % groups}`);
    (await queues[0].enqueueMany(pools[0], 'call', payloads, { groups: keys }))._unsafeUnwrap();
    let done = 0;
    let finish;
    const all = new Promise((resolve) => {
      finish = resolve;
    });
    const call = async () => {
      await new Promise((resolve) => setTimeout(resolve, wait));
      if (++done === jobs) finish();
    };
    const start = performance.now();
    const workers = queues.map((q) => q.work({ call }, { concurrency: 8 }));
    await all;
    const seconds = (performance.now() - start) / 1000;
    await Promise.all(workers.map((w) => w.stop()));
    const started = workers.map((w) => w.counters.started);
    return { perSecond: jobs / seconds, busier: Math.max(...started) / jobs };
  } finally {
    await Promise.all(pools.map((p) => p.end()));
    await db.drop();
  }
}

try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const scenario of SCENARIOS)
      for (const [name, path] of order) {
        const r = await burnDown(path, scenario);
        const key = `${name}|${scenario.join(',')}`;
        const acc = results.get(key) ?? [];
        acc.push(r);
        results.set(key, acc);
        process.stderr.write(`round ${round + 1} ${key}: ${r.perSecond.toFixed(0)} jobs/s\n`);
      }
  }
  console.log(
    '| build | serial groups | handler wait | jobs/s ÷ bound, median (min–max) | busier worker ran |',
  );
  console.log('|---|---:|---:|---:|---:|');
  for (const [key, rs] of results) {
    const [name, s] = key.split('|');
    const [groups, wait] = s.split(',').map(Number);
    const bound = (Math.min(groups, 16) * 1000) / wait;
    const ratios = rs.map((r) => r.perSecond / bound);
    const share = median(rs.map((r) => r.busier));
    console.log(`| ${name} | ${groups} | ${wait} ms | ${span(ratios, 2)} | ${(share * 100).toFixed(0)}% |`);
  }
} finally {
  await server.stop();
}
