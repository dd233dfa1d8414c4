// The claim's lease UPDATE, two ways, on the same backlog in ONE connection (interleaved rounds):
// - 'by id' (step 8 of queue migration 0001): the lock step returns the locked ids and the UPDATE joins them on the
//   primary key. The planner chooses that join: with a large backlog and fresh statistics it chose a
//   hash join over a sequential scan of the whole jobs table;
// - 'by address' (step 9, the queue's claim): the lock step returns each locked row's ctid and the
//   UPDATE fetches exactly those rows (a TID scan).
// Each round builds a fresh queue schema at the newest version, fills it with 50,000 jobs (VACUUM
// ANALYZE: fresh statistics), puts step 8's claim function back for 'by id', then claims 500 at a
// time and completes each batch until the table is empty. Reported per design: the backend's CPU per job
// (claims and completions together, from /proc: the server must run on this machine) and the rows of the
// jobs table read by sequential scans, per claim (pg_stat_user_tables before and after the burn-down).
// Run: npm run build && node bench/queue/claim-by-tid.mjs  (PGTXKIT_TID_ROUNDS, PGTXKIT_TID_JOBS)
import { loadavg } from 'node:os';
import pg from 'pg';
import { jobsFromClaim, RAW_TEXT } from '../../dist/queue/job.js';
import { QUEUE_MIGRATIONS } from '../../dist/queue/schema/queue-migrations.generated.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { filledQueue } from './filled-queue.mjs';
import { backendCpuUs } from './server-cpu.mjs';
import { median, span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_TID_ROUNDS ?? 3);
const JOBS = Number(process.env.PGTXKIT_TID_JOBS ?? 50_000);
const BATCH = 500;
const DESIGNS = ['by id', 'by address'];

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'tid' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
const load0 = loadavg()[0];
const results = new Map(DESIGNS.map((d) => [d, { cpu: [], seq: [] }]));

/**
 * The rows of q.jobs read by sequential scans so far, this backend's included: its pending counts are
 * flushed to the cumulative statistics at the end of the first statement, and the second reads them
 * without a cached snapshot.
 */
async function seqTupRead(client) {
  await client.query('SELECT pg_stat_force_next_flush()');
  const r = await client.query(
    "SET LOCAL stats_fetch_consistency = none; SELECT seq_tup_read FROM pg_stat_user_tables WHERE relid = 'q.jobs'::regclass",
  );
  return Number(r[1].rows[0].seq_tup_read);
}

/** Step 8 of migration 0001 (the claim by id, before step 9's by address), cut from the frozen file. */
function claimByIdStep() {
  const sql = QUEUE_MIGRATIONS[0].sql;
  const from = sql.indexOf('-- ===== step 8 ');
  const to = sql.indexOf('-- ===== step 9 ');
  if (from < 0 || to < 0) throw new Error('migration 0001 has no step 8');
  return sql.slice(from, to);
}

async function round(design) {
  const byId = claimByIdStep().replaceAll('{{schema}}', '"q"');
  const { statements: s } = await filledQueue(pool, {
    jobs: JOBS,
    sql: design === 'by id' ? byId : undefined,
  });
  const client = await pool.connect();
  try {
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    let jobs = 0;
    let claims = 0;
    const seqRead = () => seqTupRead(client);
    const seq0 = await seqRead();
    const cpu0 = backendCpuUs(pid);
    for (;;) {
      const r = await client.query({
        text: s.claim,
        values: [BATCH, 30_000, ['noop']],
        rowMode: 'array',
        types: RAW_TEXT,
      });
      const claimed = jobsFromClaim(r.rows[0]);
      if (claimed.length === 0) break;
      claims += 1;
      jobs += claimed.length;
      await client.query(s.completeUngrouped, [claimed.map((j) => j.id), claimed.map((j) => j.leaseToken)]);
    }
    const cpu = backendCpuUs(pid) - cpu0;
    const seqRows = (await seqRead()) - seq0;
    if (jobs !== JOBS) throw new Error(`${design}: ${jobs} of ${JOBS} jobs claimed`);
    return { cpu: cpu / jobs, seq: seqRows / claims };
  } finally {
    client.release();
  }
}

for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? DESIGNS : [...DESIGNS].reverse();
  for (const design of order) {
    const x = await round(design);
    results.get(design).cpu.push(x.cpu);
    results.get(design).seq.push(x.seq);
    process.stderr.write(
      `round ${r + 1}/${ROUNDS} ${design}: ${x.cpu.toFixed(1)} µs/job, ${x.seq.toFixed(0)} rows read by sequential scan per claim\n`,
    );
  }
}

console.log(
  `| claim's UPDATE | backend CPU µs/job, claim + completion: median (min–max) | rows read by sequential scan per claim |`,
);
console.log('|---|---:|---:|');
for (const [design, x] of results)
  console.log(`| ${design} | ${span(x.cpu)} | ${median(x.seq).toFixed(0)} |`);
console.log(
  `\n${JOBS} jobs, claims of ${BATCH}, one connection, ${ROUNDS} interleaved rounds; load average ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
);
await pool.end();
await db.drop();
await server.stop();
