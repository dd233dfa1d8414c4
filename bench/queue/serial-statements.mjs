// Where a burn-down with serial groups spends its server time, statement by statement, against the
// unlimited queue, in the same server (interleaved rounds): the worker with defaults (concurrency 8, one
// process, in this process) burns down 50,000 no-op jobs, either over 1,000 serial groups or ungrouped;
// pg_stat_statements (preloaded, nested statements tracked so a function's inner statements show) gives
// each statement's calls, execution time and buffers per job; the whole run's wall time and the server's
// CPU (from /proc) per job too. PGTXKIT_SERIAL_WORKERS=2: two workers, each on its own pool (as two worker
// processes would be; in this process).
// PGTXKIT_SERIAL_BASE=<other builds' dist folders, comma-separated>: the serial groups run on those builds
// too, in the same rounds (the unlimited queue on this build).
// Run: npm run build && node bench/queue/serial-statements.mjs  (PGTXKIT_SERIAL_ROUNDS, PGTXKIT_SERIAL_JOBS)
import { loadavg } from 'node:os';
import pg from 'pg';
import { z } from 'zod';
import * as current from '../../dist/index.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { serverCpuReader } from './server-cpu.mjs';

const ROUNDS = Number(process.env.PGTXKIT_SERIAL_ROUNDS ?? 2);
const JOBS = Number(process.env.PGTXKIT_SERIAL_JOBS ?? 50_000);
const GROUPS = 1000;
const WORKERS = Number(process.env.PGTXKIT_SERIAL_WORKERS ?? 1);
const BASES = (process.env.PGTXKIT_SERIAL_BASE ?? '').split(',').filter((b) => b !== '');
const CONTENDERS = [
  { name: 'unlimited', grouped: false, lib: current },
  ...(await Promise.all(
    BASES.map(async (b) => ({
      name: `serial groups, ${b}`,
      grouped: true,
      lib: await import(`${b}/index.js`),
    })),
  )),
  { name: 'serial groups', grouped: true, lib: current },
];
const server = await startPostgres({
  settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' },
});
const db = await createTestDatabase(server.url, { prefix: 'serialstat' });
const admin = new pg.Pool({ connectionString: db.url, max: 2 });
await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
const load0 = loadavg()[0];
const serverCpu = await serverCpuReader(admin);

async function burnDown({ grouped, lib: { Queue, TxManager } }) {
  await admin.query('DROP SCHEMA IF EXISTS bench_txkit CASCADE');
  // Each worker on its own pool and Queue, as separate worker processes would be (in this process).
  const sides = Array.from({ length: WORKERS }, () => {
    const pool = new pg.Pool({ connectionString: db.url });
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'bench_txkit',
      tasks: { noop: z.object({}) },
      ...(grouped ? { groups: { default: { concurrency: 1 } } } : {}),
    });
    return { pool, queue };
  });
  const [{ pool, queue }] = sides;
  (await queue.migrate())._unsafeUnwrap();
  for (let done = 0; done < JOBS; done += 10_000) {
    const chunk = Array.from({ length: Math.min(10_000, JOBS - done) }, () => ({}));
    const keys = chunk.map((_, i) => `g${(done + i) % GROUPS}`);
    (await queue.enqueueMany(pool, 'noop', chunk, grouped ? { groups: keys } : {}))._unsafeUnwrap();
  }
  await admin.query('VACUUM ANALYZE bench_txkit.jobs');
  await admin.query('SELECT pg_stat_statements_reset()');
  let ran = 0;
  let finish;
  const all = new Promise((r) => (finish = r));
  const handlers = {
    noop: () => {
      if (++ran === JOBS) finish();
    },
  };
  const cpu0 = serverCpu();
  const t0 = performance.now();
  const workers = sides.map((w) => w.queue.work(handlers, { concurrency: 8 }));
  await all;
  const ms = performance.now() - t0;
  const cpuUs = serverCpu() - cpu0;
  await Promise.all(workers.map((w) => w.stop()));
  await Promise.all(sides.map((w) => w.pool.end()));
  const r = await admin.query(
    `SELECT toplevel, regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time AS ms, rows,
            shared_blks_hit + shared_blks_read AS blks
       FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query NOT LIKE '%pg_stat_statements%'
      ORDER BY total_exec_time DESC LIMIT 14`,
  );
  const sum = await admin.query(
    `SELECT sum(total_exec_time) AS ms FROM pg_stat_statements
      WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query NOT LIKE '%pg_stat_statements%'`,
  );
  return { ms, cpuUs, rows: r.rows, topMs: Number(sum.rows[0].ms) };
}

try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const c of round % 2 === 0 ? CONTENDERS : [...CONTENDERS].reverse()) {
      const { ms, cpuUs, rows, topMs } = await burnDown(c);
      console.log(
        `\nround ${round + 1} ${c.name}: ${((JOBS / ms) * 1000).toFixed(0)} jobs/s, ` +
          `server CPU ${(cpuUs / JOBS).toFixed(1)} µs/job, ` +
          `top-level statements' execution ${((topMs * 1000) / JOBS).toFixed(1)} µs/job (T: top level, n: nested)`,
      );
      for (const s of rows)
        console.log(
          `  ${s.toplevel ? 'T' : 'n'} calls ${s.calls} rows ${s.rows} exec µs/job ${((s.ms * 1000) / JOBS).toFixed(1)} blks/job ${(s.blks / JOBS).toFixed(1)} | ${s.query.slice(0, 150)}`,
        );
    }
  }
  console.log(`load ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`);
} finally {
  await admin.end();
  await db.drop();
  await server.stop();
}
