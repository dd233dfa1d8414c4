// What a per-key limit costs the server per job, in ONE connection (interleaved rounds): the backend's
// CPU (from /proc: the server must run on this machine) for the claims and completions of a burn-down of
// the same backlog, three ways:
// - 'unlimited': no groups; the plain claim and the completion without group steps (the baseline);
// - 'claim and give back': the jobs spread over the groups; the limited claim and the completion that
//   gives each group's slot back (`complete`): every job is found by a claim;
// - 'take over': the same backlog; the completion that takes over the slots it frees
//   (`completeTakeNext`, what a worker sends): a group's next job comes back with the completion of the
//   one before it, and a claim only tops up what the completions did not bring.
// Each round builds a fresh queue schema at the newest version with 50,000 jobs (VACUUM ANALYZE), claims
// 2 × STEP jobs, then completes STEP at a time (and claims what it still lacks) until 25,000 jobs are done.
// After each step, the groups with more running jobs than their limit are counted (must stay 0).
// Run: npm run build && node bench/queue/take-over.mjs
// (PGTXKIT_TAKEOVER_ROUNDS, PGTXKIT_TAKEOVER_GROUPS (1,000: serial groups; fewer: concurrency 250 each),
// PGTXKIT_TAKEOVER_STEP)
import { loadavg } from 'node:os';
import pg from 'pg';
import { jobsFromClaim, RAW_TEXT } from '../../dist/queue/job.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { filledQueue } from './filled-queue.mjs';
import { backendCpuUs } from './server-cpu.mjs';
import { median, span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_TAKEOVER_ROUNDS ?? 3);
const GROUPS = Number(process.env.PGTXKIT_TAKEOVER_GROUPS ?? 1000);
const STEP = Number(process.env.PGTXKIT_TAKEOVER_STEP ?? 250);
const JOBS = 50_000;
const DONE = 25_000;
const LIMIT = GROUPS >= 1000 ? 1 : 250;
const DESIGNS = ['unlimited', 'claim and give back', 'take over'];

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'takeover' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
const limits = JSON.stringify({ default: { concurrency: LIMIT }, groups: {}, tasks: {} });
const load0 = loadavg()[0];
const results = new Map(DESIGNS.map((d) => [d, { cpu: [], over: 0 }]));

/** One burn-down of `design`: its backend CPU per job and the groups seen over their limit. */
async function burnDown(design) {
  const grouped = design !== 'unlimited';
  const { statements: sql } = await filledQueue(pool, { jobs: JOBS, groups: grouped ? GROUPS : 0 });
  const client = await pool.connect();
  try {
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const rows = async (text, values) =>
      (await client.query({ text, values, rowMode: 'array', types: RAW_TEXT })).rows[0];
    const claim = async (n) =>
      jobsFromClaim(
        grouped
          ? await rows(sql.claimLimited, [n, 30_000, ['noop'], limits])
          : await rows(sql.claim, [n, 30_000, ['noop']]),
      );
    const held = await claim(2 * STEP);
    let jobs = 0;
    let over = 0;
    const before = backendCpuUs(pid);
    while (jobs < DONE && held.length > 0) {
      const done = held.splice(0, STEP);
      const leases = [`{${done.map((j) => j.id).join(',')}}`, `{${done.map((j) => j.leaseToken).join(',')}}`];
      let got = [];
      if (design === 'take over') {
        const row = await rows(sql.completeTakeNext, [...leases, 30_000, ['noop'], limits, done.length]);
        got = jobsFromClaim([row[2], row[3], row[4], row[5]]);
      } else await rows(grouped ? sql.complete : sql.completeUngrouped, leases);
      if (got.length < done.length) got.push(...(await claim(done.length - got.length)));
      jobs += done.length;
      held.push(...got);
      if (grouped) {
        // On another connection: not counted in the measured backend's CPU.
        const r = await pool.query(
          `SELECT count(*)::int AS n FROM (SELECT 1 FROM q.jobs WHERE state = 'running' GROUP BY group_key
            HAVING count(*) > $1) x`,
          [LIMIT],
        );
        over += r.rows[0].n;
      }
    }
    return { cpu: (backendCpuUs(pid) - before) / jobs, over };
  } finally {
    client.release();
  }
}

try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? DESIGNS : [...DESIGNS].reverse();
    for (const design of order) {
      const r = await burnDown(design);
      const acc = results.get(design);
      acc.cpu.push(r.cpu);
      acc.over += r.over;
      process.stderr.write(`round ${round + 1} ${design}: ${r.cpu.toFixed(1)} µs/job\n`);
    }
  }
  const base = median(results.get('unlimited').cpu);
  console.log(
    `${GROUPS} groups × concurrency ${LIMIT}, one connection, completions of ${STEP}, ${ROUNDS} interleaved rounds, load ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
  );
  console.log("| design | backend CPU µs/job | unlimited's CPU ÷ this | groups over their limit |");
  console.log('|---|---:|---:|---:|');
  for (const [design, r] of results) {
    const ratio = (base / median(r.cpu)).toFixed(2);
    console.log(`| ${design} | ${span(r.cpu)} | ${ratio}× | ${design === 'unlimited' ? '–' : r.over} |`);
  }
} finally {
  await pool.end();
  await db.drop();
  await server.stop();
}
