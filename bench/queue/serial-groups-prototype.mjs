// Prototype, in this benchmark only (the queue's schema is not changed): serial groups (concurrency 1)
// without writing a group row. The queue's limited claim locks and updates each group's row
// (job_groups.running) when it claims a job, and every settle locks and updates it again to give the
// slot back: four row writes per grouped job besides the job's own. Here:
// - the claim is two statements in one plpgsql call. The first takes the groups of the first 2n + 32
//   ready jobs in claim order and try-locks each with a transaction-scoped advisory lock
//   (pg_try_advisory_xact_lock(class, hashtext(key)): no wait, no row written, held until the claim
//   commits; a hash collision only makes a claim skip a group). The second runs with a NEW snapshot,
//   taken after those locks were granted, so every claim of these groups that committed before is
//   visible, and no other claim of them can commit until this one does. It takes, for each locked group
//   with no running job (a partial index on the running jobs' group), its first ready job;
// - a settle writes nothing for the group: the job leaving 'running' is what frees it (the queue's
//   completion without the group steps).
// Compared, interleaved, each in ONE connection on the same backlog (50,000 jobs over 1,000 groups, or
// none for the plain queue), claiming n/4 jobs and completing n/4 per step with n/2 held: A = the queue's
// limited claim and completion, B = the prototype, C = the plain claim on ungrouped jobs (the unlimited
// queue). Reported: the backend's CPU per job (claim and completion), and after every claim the number of
// groups with two running jobs (must stay 0). One connection measures the cost only: the guarantee under
// concurrent claims rests on the argument above and is not tested here.
// Not covered by the prototype (what adopting it would need): concurrency N > 1 and rate limits, and
// claims that do not take the advisory locks (the plain claim of a queue that declares no limits, or an
// older worker during a deploy) — those would have to take them too.
// Run: npm run build && node bench/queue/serial-groups-prototype.mjs  (PGTXKIT_PROTO_ROUNDS, PGTXKIT_PROTO_GROUPS)
import { loadavg } from 'node:os';
import pg from 'pg';
import { jobsFromClaim, RAW_TEXT } from '../../dist/queue/job.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { filledQueue } from './filled-queue.mjs';
import { backendCpuUs } from './server-cpu.mjs';
import { span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_PROTO_ROUNDS ?? 3);
const GROUPS = Number(process.env.PGTXKIT_PROTO_GROUPS ?? 1000);
const JOBS = 50_000;
const HELD = 250;
const STEP = 125;

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'proto' });
const pool = new pg.Pool({ connectionString: db.url, max: 2 });

const PROTOTYPE = `
  -- The running jobs of each group: one index entry per claim (the claim's UPDATE is not HOT anyway:
  -- it changes state, which every index of jobs names in its predicate).
  CREATE INDEX jobs_group_running ON q.jobs (group_key) WHERE state = 'running';
  CREATE FUNCTION q.claim_serial(n integer, lease_ms double precision, tasks text[]) RETURNS SETOF q.jobs
    LANGUAGE plpgsql VOLATILE SET enable_sort = off AS $f$
  DECLARE
    budget integer := n * 2 + 32;
    gs text[];
  BEGIN
    -- Lock: advisory, transaction-scoped, try (never waits) on the groups of the head window, in claim
    -- order, at most n. No row lock, nothing written.
    gs := ARRAY(
      SELECT c.key FROM (
        SELECT h.group_key AS key, min(h.pos) AS ord FROM (
          SELECT j.group_key, row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
            FROM (SELECT group_key, priority, run_at, id FROM q.jobs
                   WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
                   ORDER BY priority, run_at, id LIMIT budget) j) h
         GROUP BY h.group_key) c
       WHERE pg_try_advisory_xact_lock(424242, hashtext(c.key))
       ORDER BY c.ord LIMIT n);
    -- A new statement, a new snapshot (taken after the locks). Lock: FOR UPDATE SKIP LOCKED on the first
    -- ready job of each locked group with no running job, then the lease UPDATE.
    RETURN QUERY
    WITH free AS MATERIALIZED (
      SELECT k FROM unnest(gs) AS k
       WHERE NOT EXISTS (SELECT 1 FROM q.jobs r WHERE r.group_key = k AND r.state = 'running')
    ), pick AS MATERIALIZED (
      SELECT (SELECT j.id FROM q.jobs j
               WHERE coalesce(j.group_key, '') = f.k AND j.state = 'pending' AND j.run_at <= now()
                 AND j.task = ANY(tasks)
               ORDER BY j.priority, j.run_at, j.id LIMIT 1 FOR UPDATE SKIP LOCKED) AS id
        FROM free f
    )
    UPDATE q.jobs j SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
           lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM pick p WHERE j.id = p.id
    RETURNING j.*;
  END $f$;`;

async function run(design) {
  const { statements: sql } = await filledQueue(pool, {
    jobs: JOBS,
    groups: design === 'plain' ? 0 : GROUPS,
    sql: design === 'prototype' ? PROTOTYPE : undefined,
  });
  const limits = JSON.stringify({ default: { concurrency: 1 }, groups: {}, tasks: {} });
  const client = await pool.connect();
  try {
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    // Each claimed job as [id, lease token].
    const claim = async (n) => {
      if (design !== 'prototype') {
        const [text, values] =
          design === 'queue'
            ? [sql.claimLimited, [n, 30_000, ['noop'], limits]]
            : [sql.claim, [n, 30_000, ['noop']]];
        const r = await client.query({ text, values, rowMode: 'array', types: RAW_TEXT });
        return jobsFromClaim(r.rows[0]).map((j) => [j.id, j.leaseToken]);
      }
      const r = await client.query('SELECT id, lease_token FROM q.claim_serial($1, $2, $3)', [
        n,
        30_000,
        ['noop'],
      ]);
      return r.rows.map((x) => [x.id, x.lease_token]);
    };
    const complete = design === 'queue' ? sql.complete : sql.completeUngrouped;
    const held = await claim(HELD);
    let jobs = 0;
    let claimUs = 0;
    let completeUs = 0;
    let overLimit = 0;
    for (;;) {
      const done = held.splice(0, STEP);
      const a = backendCpuUs(pid);
      await client.query(complete, [
        `{${done.map((d) => d[0]).join(',')}}`,
        `{${done.map((d) => d[1]).join(',')}}`,
      ]);
      const b = backendCpuUs(pid);
      const got = await claim(STEP);
      claimUs += backendCpuUs(pid) - b;
      completeUs += b - a;
      jobs += got.length;
      held.push(...got);
      const over = await client.query(
        `SELECT count(*)::int AS n FROM (SELECT 1 FROM q.jobs WHERE state = 'running' AND group_key IS NOT NULL
          GROUP BY group_key HAVING count(*) > 1) x`,
      );
      overLimit += over.rows[0].n;
      if (got.length === 0 || jobs >= 20_000) break;
    }
    return { claim: claimUs / jobs, complete: completeUs / jobs, overLimit };
  } finally {
    client.release();
  }
}

const designs = ['queue', 'prototype', 'plain'];
const results = new Map(designs.map((d) => [d, []]));
const load0 = loadavg()[0];
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? designs : [...designs].reverse();
    for (const design of order) {
      const r = await run(design);
      results.get(design).push(r);
      process.stderr.write(
        `round ${round + 1} ${design}: claim ${r.claim.toFixed(1)} + completion ${r.complete.toFixed(1)} µs/job, groups over their limit ${r.overLimit}\n`,
      );
    }
  }
  console.log(
    `${GROUPS} serial groups, one connection, ${ROUNDS} interleaved rounds, load ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
  );
  console.log('| design | claim µs/job | completion µs/job | total µs/job | groups over their limit |');
  console.log('|---|---:|---:|---:|---:|');
  const label = {
    queue: 'the queue (group rows)',
    prototype: 'prototype (advisory locks, no group row)',
    plain: 'plain queue, no groups',
  };
  for (const [design, rs] of results) {
    console.log(
      `| ${label[design]} | ${span(rs.map((r) => r.claim))} | ${span(rs.map((r) => r.complete))} | ${span(rs.map((r) => r.claim + r.complete))} | ${rs.reduce((a, r) => a + r.overLimit, 0)} |`,
    );
  }
} finally {
  await pool.end();
  await db.drop();
  await server.stop();
}
