// Where a queue's server CPU goes per job at low load, statement by statement, in ONE connection (its
// backend's CPU from /proc: the server must run on this machine; CPU time, not wall time, so the figures
// hold on a busy machine better than any timing):
// - enqueue: pg-txkit's enqueue() of one job (its INSERT with the jobs_notify trigger's pg_notify), the
//   same with the trigger disabled (the NOTIFY's price; a LISTEN session is connected, as a worker's is,
//   and reads every notification), and graphile-worker's add_job() of one job: the whole server's CPU
//   (the listening backend's included, see server-cpu.mjs), not the one backend's;
// - the claim and the completion at batch sizes 1, 8 and 64: what a worker pays per job when few jobs
//   are ready at a time (2,000 jobs/s over 8 handlers: claims of 6–8 in the steady-state benchmark) and
//   what it pays in a backlog.
// Interleaved rounds, median (min–max) of the per-round figures.
// Run: npm run build && node bench/queue/statement-costs.mjs  (PGTXKIT_COST_ROUNDS, PGTXKIT_COST_OPS)
import { loadavg } from 'node:os';
import { makeWorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { jobsFromClaim, RAW_TEXT } from '../../dist/queue/job.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { filledQueue } from './filled-queue.mjs';
import { backendCpuUs, serverCpuReader } from './server-cpu.mjs';
import { span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_COST_ROUNDS ?? 3);
/** Jobs per measured step (enough 10 ms clock ticks of backend CPU for a stable figure). */
const OPS = Number(process.env.PGTXKIT_COST_OPS ?? 4000);
const BATCHES = [1, 8, 64];

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'cost' });
const pool = new pg.Pool({ connectionString: db.url, max: 3 });
const load0 = loadavg()[0];
/** step → per-round µs/job */
const results = new Map();
const note = (step, us) => results.set(step, [...(results.get(step) ?? []), us]);

const serverCpu = await serverCpuReader(pool);

/** The whole server's CPU µs per job `run` costs for `jobs` jobs. */
async function serverCpuPerJob(jobs, run) {
  const before = serverCpu();
  await run();
  return (serverCpu() - before) / jobs;
}

async function enqueueSteps() {
  const { queue } = await filledQueue(pool, { jobs: 0 });
  const listener = await pool.connect();
  const client = await pool.connect();
  try {
    let heard = 0;
    listener.on('notification', () => heard++);
    await listener.query('LISTEN q_jobs');
    const one = async () => {
      for (let i = 0; i < OPS; i++) (await queue.enqueue(client, 'noop', {}))._unsafeUnwrap();
      // Every notification read by the listening backend before the figure is taken.
      await listener.query('SELECT 1');
    };
    note('enqueue (pg-txkit, one job per statement, with its NOTIFY)', await serverCpuPerJob(OPS, one));
    if (heard < OPS) throw new Error(`${heard} notifications for ${OPS} jobs`);
    await client.query('ALTER TABLE q.jobs DISABLE TRIGGER jobs_notify');
    note('enqueue (pg-txkit) with the jobs_notify trigger disabled', await serverCpuPerJob(OPS, one));
    await client.query('ALTER TABLE q.jobs ENABLE TRIGGER jobs_notify');
  } finally {
    await listener.query('UNLISTEN *');
    listener.release();
    client.release();
  }
  const utils = await makeWorkerUtils({ connectionString: db.url });
  await utils.migrate();
  await utils.release();
  const graphile = await pool.connect();
  try {
    await graphile.query('DELETE FROM graphile_worker._private_jobs');
    note(
      'add_job (graphile-worker, one job per statement, with its NOTIFY)',
      await serverCpuPerJob(OPS, async () => {
        for (let i = 0; i < OPS; i++)
          await graphile.query('SELECT * FROM graphile_worker.add_job($1::text, $2::json)', ['noop', '{}']);
      }),
    );
  } finally {
    graphile.release();
  }
}

async function claimAndComplete(batch) {
  const { statements: s } = await filledQueue(pool, { jobs: OPS });
  const client = await pool.connect();
  try {
    let claimCpu = 0;
    let completeCpu = 0;
    let jobs = 0;
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    // Claims of `batch` and their completions in two measured phases of interleaved statements: the
    // CPU of each statement kind summed over the burn-down.
    for (;;) {
      const c0 = backendCpuUs(pid);
      const r = await client.query({
        text: s.claim,
        values: [batch, 30_000, ['noop']],
        rowMode: 'array',
        types: RAW_TEXT,
      });
      const claimed = jobsFromClaim(r.rows[0]);
      const c1 = backendCpuUs(pid);
      if (claimed.length === 0) break;
      await client.query(s.completeUngrouped, [claimed.map((j) => j.id), claimed.map((j) => j.leaseToken)]);
      const c2 = backendCpuUs(pid);
      claimCpu += c1 - c0;
      completeCpu += c2 - c1;
      jobs += claimed.length;
    }
    if (jobs !== OPS) throw new Error(`${jobs} of ${OPS} jobs claimed`);
    note(`claim, ${batch} job(s) per statement`, claimCpu / jobs);
    note(`completion, ${batch} job(s) per statement`, completeCpu / jobs);
  } finally {
    client.release();
  }
}

for (let r = 0; r < ROUNDS; r++) {
  const steps = [enqueueSteps, ...BATCHES.map((b) => () => claimAndComplete(b))];
  const order = steps.map((_, i) => steps[(i + r) % steps.length]);
  for (const step of order) await step();
  process.stderr.write(`round ${r + 1}/${ROUNDS}\n`);
}

console.log(
  "| statement | CPU µs/job (enqueue: the whole server's; claim, completion: the connection's backend): median (min–max) |",
);
console.log('|---|---:|');
for (const [step, xs] of results) console.log(`| ${step} | ${span(xs)} |`);
console.log(
  `\n${OPS} jobs per step, one connection, ${ROUNDS} interleaved rounds; load average ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
);
await pool.end();
await db.drop();
await server.stop();
