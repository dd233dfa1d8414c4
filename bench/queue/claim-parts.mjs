// What a small claim's fixed cost is made of, on a queue WITHOUT groups, in ONE connection (its backend's
// CPU from /proc: the server must run on this machine): the claim as shipped against variants of its
// function put in place for the measurement only (the queue's schema is not changed):
// - 'no group steps': claim_jobs without its three steps that count the claimed jobs of each group (they
//   run, plan and execute on every claim, grouped job or not);
// - 'plain rows': the function's rows as they are, instead of the one row of aggregates the worker
//   decodes (claimed-aggregates.ts: string_agg and json_agg over the claimed jobs).
// Each round builds a fresh queue (filled-queue.mjs), claims PGTXKIT_PARTS_BATCH jobs at a time (default
// 8: what one worker claims at 2,000 jobs/s) and deletes each batch, until the table is empty; CPU per
// claim statement, median (min–max) of interleaved rounds.
// Run: npm run build && node bench/queue/claim-parts.mjs  (PGTXKIT_PARTS_ROUNDS, PGTXKIT_PARTS_BATCH)
import { loadavg } from 'node:os';
import pg from 'pg';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { cpuPerClaim, printClaimTable } from './claim-cpu.mjs';
import { filledQueue } from './filled-queue.mjs';

const ROUNDS = Number(process.env.PGTXKIT_PARTS_ROUNDS ?? 5);
const BATCH = Number(process.env.PGTXKIT_PARTS_BATCH ?? 8);
const JOBS = 8000;

/** claim_jobs as migration 0001 leaves it, with or without its group steps. */
const claimFunction = (groupSteps) => `
  CREATE OR REPLACE FUNCTION q.claim_jobs(n integer, lease_ms double precision, tasks text[])
    RETURNS SETOF q.jobs LANGUAGE sql VOLATILE SET enable_sort = off AS $$
    WITH c AS MATERIALIZED (
      SELECT ctid AS tid FROM q.jobs WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
       ORDER BY priority, run_at, id LIMIT n FOR UPDATE SKIP LOCKED),
    up AS (
      UPDATE q.jobs j SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
             lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
       WHERE j.ctid = ANY(ARRAY(SELECT tid FROM c)) RETURNING j.*)
    ${
      groupSteps
        ? `, claimed AS MATERIALIZED (SELECT group_key AS key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key),
    gl AS MATERIALIZED (SELECT g.key FROM q.job_groups g WHERE g.key = ANY(ARRAY(SELECT key FROM claimed)) ORDER BY g.key FOR UPDATE OF g),
    gu AS (UPDATE q.job_groups g SET running = g.running + c.k FROM claimed c WHERE g.key = c.key)`
        : ''
    }
    SELECT * FROM up ORDER BY priority, run_at, id $$`;

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'parts' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
const load0 = loadavg()[0];
const results = new Map();

async function round(groupSteps, rows) {
  const { statements: s } = await filledQueue(pool, { jobs: JOBS, sql: claimFunction(groupSteps) });
  return cpuPerClaim(
    pool,
    {
      text: rows ? 'SELECT * FROM q.claim_jobs($1::int, $2::float8, $3::text[])' : s.claim,
      values: [BATCH, 30_000, ['noop']],
    },
    rows ? { ids: (r) => r.map((row) => row[0]) } : {},
  );
}

const VARIANTS = [
  ['as shipped (group steps, one row of aggregates)', true, false],
  ['no group steps', false, false],
  ['plain rows', true, true],
  ['no group steps, plain rows', false, true],
];
for (let r = 0; r < ROUNDS; r++) {
  for (let i = 0; i < VARIANTS.length; i++) {
    const [name, groupSteps, rows] = VARIANTS[(i + r) % VARIANTS.length];
    results.set(name, [...(results.get(name) ?? []), await round(groupSteps, rows)]);
  }
  process.stderr.write(`round ${r + 1}/${ROUNDS}\n`);
}
printClaimTable(
  [`claim of ${BATCH} jobs, queue without groups`, 'backend CPU µs per claim: median (min–max)'],
  results,
  { jobs: JOBS, rounds: ROUNDS, load0 },
);
await pool.end();
await db.drop();
await server.stop();
