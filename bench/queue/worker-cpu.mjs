// Worker CPU per job, focused: ONE worker process (bench/queue/child.mjs, concurrency 8) burns down a
// pre-filled queue of N no-op jobs; reported per contender: its own CPU time (process.cpuUsage, user +
// system, from 'go' to the empty table) per job, the same from its 5,000th job on (warm: see child.mjs),
// and the server's CPU per job (postmaster + backends,
// from /proc). Contenders: pg-txkit with the worker's defaults (every safety feature on), and the bare
// hand-written SKIP LOCKED loop measured in the same run as the floor. Rounds interleave (A B, B A, …);
// medians with min–max. Less sensitive to a loaded machine than jobs/s.
// Run: npm run build && node bench/queue/worker-cpu.mjs
// Env: PGTXKIT_CPU_JOBS (default 20000), PGTXKIT_CPU_ROUNDS (default 5), PGTXKIT_CPU_ONLY=txkit,raw,
// PGTXKIT_CPU_PROF=<dir> (a CPU profile of each burn-down's measured part into that folder), PGTXKIT_CPU_BASE=<a dist
// folder> (adds the contender txkit-base: that build of pg-txkit, e.g. a copy of dist/ before a change).
// A contender named with '+held' (txkit+held, txkit-base+held, raw+held) burns down while another session
// holds a REPEATABLE READ snapshot open (from before 'go' to the empty table): the MVCC horizon is held
// back, as by a long report query or a session idle in transaction; its capacity ÷ the same contender's
// without, round by round, is reported below the table.
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { z } from 'zod';
import { Queue, TxManager } from '../../dist/index.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { serverCpuReader } from './server-cpu.mjs';
import { span } from './stats.mjs';

const N = Number(process.env.PGTXKIT_CPU_JOBS ?? 20_000);
const ROUNDS = Number(process.env.PGTXKIT_CPU_ROUNDS ?? 5);
const PROF = process.env.PGTXKIT_CPU_PROF;
const BASE = process.env.PGTXKIT_CPU_BASE;
const ONLY = (
  process.env.PGTXKIT_CPU_ONLY ?? (BASE === undefined ? 'txkit,raw' : 'txkit,txkit-base,raw')
).split(',');
const child = fileURLToPath(new URL('./child.mjs', import.meta.url));

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'cpu' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });

const serverCpu = await serverCpuReader(pool);

async function prepare(system) {
  if (system.startsWith('txkit')) {
    await pool.query('DROP SCHEMA IF EXISTS bench_txkit CASCADE');
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'bench_txkit',
      tasks: { noop: z.object({}) },
    });
    (await queue.migrate())._unsafeUnwrap();
    for (let i = 0; i < N; i += 10_000) {
      const n = Math.min(10_000, N - i);
      (
        await queue.enqueueMany(
          pool,
          'noop',
          Array.from({ length: n }, () => ({})),
        )
      )._unsafeUnwrap();
    }
    await pool.query('VACUUM ANALYZE bench_txkit.jobs');
    return 'SELECT EXISTS (SELECT 1 FROM bench_txkit.jobs) AS left';
  }
  await pool.query('DROP SCHEMA IF EXISTS bench_raw CASCADE');
  await pool.query('CREATE SCHEMA bench_raw');
  await pool.query(
    'CREATE TABLE bench_raw.jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL, claimed boolean NOT NULL DEFAULT false)',
  );
  await pool.query('INSERT INTO bench_raw.jobs (payload) SELECT $1::jsonb FROM generate_series(1, $2)', [
    '{}',
    N,
  ]);
  await pool.query('VACUUM ANALYZE bench_raw.jobs');
  return 'SELECT EXISTS (SELECT 1 FROM bench_raw.jobs) AS left';
}

let profiles = 0;
async function burnDown(contender) {
  const held = contender.endsWith('+held');
  const system = held ? contender.slice(0, -'+held'.length) : contender;
  const someLeft = await prepare(system);
  const proc = fork(child, [], {
    env: {
      ...process.env,
      ...(system === 'txkit-base' ? { BENCH_DIST: pathToFileURL(`${BASE}/index.js`).href } : {}),
      BENCH_SYSTEM: system === 'txkit-base' ? 'txkit' : system,
      BENCH_URL: db.url,
      BENCH_CONFIG: 'defaults',
      BENCH_CONCURRENCY: '8',
      ...(PROF === undefined ? {} : { BENCH_PROF: `${PROF}/${contender}-${++profiles}.cpuprofile` }),
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  await new Promise((resolve) => proc.once('message', resolve));
  const cpu = new Promise((resolve) =>
    proc.on('message', (m) => {
      if (typeof m?.cpuUs === 'number') resolve(m);
    }),
  );
  // The snapshot holder: its own connection (not the pool's two), its snapshot taken before 'go'.
  const holder = held ? new pg.Client({ connectionString: db.url }) : undefined;
  if (holder !== undefined) {
    await holder.connect();
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
  }
  const s0 = serverCpu();
  const t0 = performance.now();
  proc.send('go');
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    if (!(await pool.query(someLeft)).rows[0].left) break;
  }
  const seconds = (performance.now() - t0) / 1000;
  const s1 = serverCpu();
  if (holder !== undefined) await holder.end();
  proc.send('stop');
  const { cpuUs, warmCpuUs, warmJobs } = await cpu;
  await exited;
  await pool.query('VACUUM');
  return {
    jobsPerSec: N / seconds,
    workerUs: cpuUs / N,
    warmUs: warmJobs > 0 ? warmCpuUs / warmJobs : Number.NaN,
    serverUs: (s1 - s0) / N,
  };
}

const results = new Map(ONLY.map((s) => [s, []]));
const load0 = loadavg()[0];
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ONLY : [...ONLY].reverse();
    for (const system of order) {
      const r = await burnDown(system);
      results.get(system).push(r);
      process.stderr.write(
        `round ${round + 1} ${system}: ${r.workerUs.toFixed(1)} µs/job worker (warm ${r.warmUs.toFixed(1)}), ${r.serverUs.toFixed(1)} server, ${Math.round(r.jobsPerSec)} jobs/s\n`,
      );
    }
  }
  console.log(
    `${N} no-op jobs, 1 worker process × concurrency 8, ${ROUNDS} interleaved rounds, load ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
  );
  console.log('| contender | worker CPU µs/job | warm (from its 5,000th job) | server CPU µs/job | jobs/s |');
  console.log('|---|---:|---:|---:|---:|');
  for (const [contender, rs] of results) {
    const system = contender.replace(/\+held$/, '');
    const label = `${
      {
        txkit: 'pg-txkit, worker defaults',
        'txkit-base': `pg-txkit from ${BASE}, worker defaults`,
        raw: 'bare SKIP LOCKED loop',
      }[system]
    }${contender.endsWith('+held') ? ', snapshot held' : ''}`;
    console.log(
      `| ${label} | ${span(rs.map((r) => r.workerUs))} | ${span(rs.map((r) => r.warmUs))} | ${span(rs.map((r) => r.serverUs))} | ${span(rs.map((r) => r.jobsPerSec))} |`,
    );
  }
  for (const [contender, rs] of results) {
    const without = results.get(contender.replace(/\+held$/, ''));
    if (!contender.endsWith('+held') || without === undefined) continue;
    const ratios = rs.map((r, i) => r.jobsPerSec / (without[i]?.jobsPerSec ?? Number.NaN));
    console.log(`${contender}: capacity with the snapshot held ÷ without, same round: ${span(ratios, 2)}`);
  }
} finally {
  await pool.end();
  await db.drop().catch(() => {});
  await server.stop();
}
