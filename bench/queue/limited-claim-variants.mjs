// What a small limited claim (a queue with groups) costs the server with NO snapshot held, in ONE
// connection (its backend's CPU from /proc: the server must run on this machine): the claim of
// migration 0011 (put in place for the measurement as claim_jobs_limited_0011) against the claims of
// migration 0012: from the front as the worker sends it while the claim floor is not in use
// (claimLimited: the same body plus the floor's row, 'fb'), and measured (claimLimitedMeasured, the
// sweep the worker sends once a second, or each claim while the floor is in use).
// Each round builds a fresh queue (filled-queue.mjs: JOBS jobs over 50 groups), claims
// PGTXKIT_LCLAIMV_BATCH jobs at a time (default 8), then (not measured) deletes them and zeroes the
// groups' counters, until the table is empty; CPU per claim statement, median (min–max) of interleaved
// rounds. With `rates`, the groups have a rate (the full path: rate windows and the wait row).
// Run: npm run build && flock /tmp/pgtxkit-bench.lock node bench/queue/limited-claim-variants.mjs
//      (PGTXKIT_LCLAIMV_ROUNDS, PGTXKIT_LCLAIMV_BATCH)
import { loadavg } from 'node:os';
import pg from 'pg';
import { QUEUE_MIGRATIONS } from '../../dist/queue/schema/queue-migrations.generated.js';
import { claimedAggregates } from '../../dist/queue/store/claimed-aggregates.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { cpuPerClaim, printClaimTable } from './claim-cpu.mjs';
import { filledQueue } from './filled-queue.mjs';

const ROUNDS = Number(process.env.PGTXKIT_LCLAIMV_ROUNDS ?? 5);
const BATCH = Number(process.env.PGTXKIT_LCLAIMV_BATCH ?? 8);
const JOBS = 4000;
const LIMITS = {
  concurrency: JSON.stringify({ default: { concurrency: 4 }, groups: {}, tasks: {} }),
  rates: JSON.stringify({
    default: { concurrency: 4, rate: { limit: 1_000, perMs: 1 } },
    groups: {},
    tasks: {},
  }),
};

/** Migration 0011's claim_jobs_limited, renamed, in schema q. */
const M11 = QUEUE_MIGRATIONS.find((m) => m.version === 11)
  .sql.replaceAll('{{schema}}', '"q"')
  .replace('"q".claim_jobs_limited(', '"q".claim_jobs_limited_0011(');
const BEFORE = `SELECT ${claimedAggregates(' FILTER (WHERE j.id IS NOT NULL)')}, min(r.wait_ms) AS wait_ms
  FROM "q".claim_jobs_limited_0011($1::int, $2::float8, $3::text[], $4::jsonb) AS r
  CROSS JOIN LATERAL (SELECT (r.job).*) AS j`;

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'lclaimv' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
const load0 = loadavg()[0];
const results = new Map();

async function round(query, limits) {
  const { statements: s } = await filledQueue(pool, { jobs: JOBS, groups: 50, sql: M11 });
  const { text, extra } = query(s);
  return cpuPerClaim(
    pool,
    { text, values: [BATCH, 30_000, ['noop'], limits, ...extra] },
    {
      afterBatch: (client) =>
        client.query('UPDATE q.job_groups SET running = 0, rate_times = $1 WHERE running > 0', ['{}']),
    },
  );
}

const VARIANTS = [
  ['0011: claim_jobs_limited from the front', () => ({ text: BEFORE, extra: [] })],
  ['0012: claimLimited (from the front, the floor not in use)', (s) => ({ text: s.claimLimited, extra: [] })],
  [
    '0012: claimLimitedMeasured from the front (a sweep)',
    (s) => ({ text: s.claimLimitedMeasured, extra: [Number.NEGATIVE_INFINITY, '0'] }),
  ],
];
for (let r = 0; r < ROUNDS; r++) {
  for (const [path, limits] of Object.entries(LIMITS))
    for (let i = 0; i < VARIANTS.length; i++) {
      const [name, query] = VARIANTS[(i + r) % VARIANTS.length];
      const key = `${path} | ${name}`;
      results.set(key, [...(results.get(key) ?? []), await round(query, limits)]);
    }
  process.stderr.write(`round ${r + 1}/${ROUNDS}\n`);
}
printClaimTable(
  ['limits', `claim of ${BATCH} jobs over 50 groups`, 'backend CPU µs per claim: median (min–max)'],
  results,
  { jobs: JOBS, rounds: ROUNDS, load0 },
);
await pool.end();
await db.drop();
await server.stop();
