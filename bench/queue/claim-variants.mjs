// What a small plain claim costs the server, on a queue WITHOUT groups, in ONE connection (its backend's
// CPU from /proc: the server must run on this machine), against variants put in place for the
// measurement only:
// - the claim statement as the worker sent it before migration 0008: an unnamed statement of the one row
//   of aggregates (claimed-aggregates.ts) over claim_jobs' rows, parsed and planned at every call; the
//   same statement prepared once (the price of parsing and planning it);
// - the claim now: a call of claim_jobs_packed (migration 0008), which returns that row itself, with
//   its plans kept per connection, and claims a batch without a grouped job without the group steps.
// Each round builds a fresh queue (filled-queue.mjs), claims PGTXKIT_CLAIMV_BATCH jobs at a time (default
// 8) and deletes each batch, until the table is empty; CPU per claim statement, median (min–max) of
// interleaved rounds.
// Run: npm run build && node bench/queue/claim-variants.mjs  (PGTXKIT_CLAIMV_ROUNDS, PGTXKIT_CLAIMV_BATCH)
import { loadavg } from 'node:os';
import pg from 'pg';
import { claimedAggregates } from '../../dist/queue/store/claimed-aggregates.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { cpuPerClaim, printClaimTable } from './claim-cpu.mjs';
import { filledQueue } from './filled-queue.mjs';

const ROUNDS = Number(process.env.PGTXKIT_CLAIMV_ROUNDS ?? 5);
const BATCH = Number(process.env.PGTXKIT_CLAIMV_BATCH ?? 8);
const JOBS = 8000;

const BEFORE = `SELECT ${claimedAggregates('')}
  FROM "q".claim_jobs($1::int, $2::float8, $3::text[], '-infinity'::timestamptz, 0::bigint) AS j`;

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'claimv' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
const load0 = loadavg()[0];
const results = new Map();

async function round(query) {
  const { statements: s } = await filledQueue(pool, { jobs: JOBS });
  return cpuPerClaim(pool, { ...query(s), values: [BATCH, 30_000, ['noop']] });
}

const VARIANTS = [
  ['before 0008: aggregates over claim_jobs, unnamed', () => ({ text: BEFORE })],
  ['before 0008: the same, named (prepared once)', () => ({ name: 'claim_before', text: BEFORE })],
  ['now: claim_jobs_packed, unnamed (as the worker sends it)', (s) => ({ text: s.claim })],
];
for (let r = 0; r < ROUNDS; r++) {
  for (let i = 0; i < VARIANTS.length; i++) {
    const [name, query] = VARIANTS[(i + r) % VARIANTS.length];
    results.set(name, [...(results.get(name) ?? []), await round(query)]);
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
