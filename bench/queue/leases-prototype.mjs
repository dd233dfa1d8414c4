// Prototype, in this benchmark only (the queue's schema is not changed): can a claim leave the indexed
// columns alone, so that its UPDATE is HOT? The queue's claim sets state = 'running', and every index of
// the jobs table names `state` (in its predicate), so no claim is ever HOT. Here the lease moves to a
// table of its own: a job is running while it has a row in `leases`; the claim inserts the lease and only
// counts the attempt in the jobs row (`attempts`, `updated_at`: no index names them; fillfactor 70 leaves
// room on the page for the new version). The claim skips leased jobs with an anti-join.
//
// Compared, interleaved (A B, B A, …), each burning down N jobs with the same driver (8 loops, each
// claiming 50 and completing them in one statement): A = the queue's own claim and completion
// (Queue.claim, Queue.completeMany), B = the leases prototype. Reported per design: jobs/s, server CPU
// per job, HOT updates / updates, the largest n_dead_tup seen, and the heap and index sizes at the end.
// Run: npm run build && node bench/queue/leases-prototype.mjs  (PGTXKIT_PROTO_JOBS, PGTXKIT_PROTO_ROUNDS)
import { loadavg } from 'node:os';
import pg from 'pg';
import { z } from 'zod';
import { Queue, TxManager } from '../../dist/index.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { serverCpuReader } from './server-cpu.mjs';
import { span } from './stats.mjs';

const N = Number(process.env.PGTXKIT_PROTO_JOBS ?? 100_000);
const ROUNDS = Number(process.env.PGTXKIT_PROTO_ROUNDS ?? 3);
const LOOPS = 8;
const BATCH = 50;

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'proto' });
const pool = new pg.Pool({ connectionString: db.url, max: LOOPS + 2 });
const monitor = new pg.Pool({ connectionString: db.url, max: 1 });
const serverCpu = await serverCpuReader(monitor);

const queue = new Queue({
  pool,
  txManager: new TxManager(pool),
  schema: 'cur',
  tasks: { noop: z.object({}) },
});

const PROTO_SCHEMA = `
  DROP SCHEMA IF EXISTS proto CASCADE;
  CREATE SCHEMA proto;
  CREATE TABLE proto.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task text NOT NULL, payload jsonb NOT NULL,
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'dead')),
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 5,
    key text, last_error text,
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now()
  ) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
          autovacuum_vacuum_insert_scale_factor = 0.02);
  CREATE INDEX jobs_claimable ON proto.jobs (priority, run_at, id) WHERE state = 'pending';
  CREATE UNIQUE INDEX jobs_key ON proto.jobs (task, key) WHERE key IS NOT NULL AND state = 'pending';
  CREATE INDEX jobs_dead ON proto.jobs (task, id) WHERE state = 'dead';
  -- A job is running while it has a lease.
  CREATE TABLE proto.leases (job_id bigint PRIMARY KEY, token uuid NOT NULL, expires_at timestamptz NOT NULL)
    WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
  CREATE INDEX leases_expiry ON proto.leases (expires_at);`;

// Locks: FOR UPDATE SKIP LOCKED on the chosen pending jobs without a lease (as the queue's claim), then
// the lease's INSERT (a unique-index entry per job; ON CONFLICT DO NOTHING drops a job another claimer
// leased after this statement's snapshot) and the UPDATE's row locks on the jobs whose lease was inserted.
const PROTO_CLAIM = `
  WITH c AS MATERIALIZED (
    SELECT j.id FROM proto.jobs j
     WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY($3::text[])
       AND NOT EXISTS (SELECT 1 FROM proto.leases l WHERE l.job_id = j.id)
     ORDER BY j.priority, j.run_at, j.id
     LIMIT $1
     FOR UPDATE SKIP LOCKED
  ), l AS (
    INSERT INTO proto.leases (job_id, token, expires_at)
    SELECT id, gen_random_uuid(), now() + $2 * interval '1 millisecond' FROM c
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, token, expires_at
  ), u AS (
    UPDATE proto.jobs j SET attempts = j.attempts + 1, updated_at = now()
      FROM l WHERE j.id = l.job_id
    RETURNING j.id, j.task, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts, j.key,
              j.last_error, j.created_at
  )
  SELECT u.*, l.token, l.expires_at FROM u JOIN l ON l.job_id = u.id`;

// Locks: FOR UPDATE (DELETE) on each lease still held under its token, then on its job. Fenced by token.
const PROTO_COMPLETE = `
  WITH l AS (
    DELETE FROM proto.leases l USING unnest($1::bigint[], $2::uuid[]) AS i(id, token)
     WHERE l.job_id = i.id AND l.token = i.token
    RETURNING l.job_id
  ), d AS (DELETE FROM proto.jobs j USING l WHERE j.id = l.job_id RETURNING j.id)
  SELECT count(*)::int AS n FROM d`;

const designs = {
  current: {
    tables: ['cur.jobs'],
    async prepare() {
      await monitor.query('DROP SCHEMA IF EXISTS cur CASCADE');
      (await queue.migrate())._unsafeUnwrap();
      for (let i = 0; i < N; i += 10_000) {
        const n = Math.min(10_000, N - i);
        (
          await queue.enqueueMany(
            monitor,
            'noop',
            Array.from({ length: n }, () => ({})),
          )
        )._unsafeUnwrap();
      }
    },
    async step() {
      const jobs = (await queue.claim({ batch: BATCH, tasks: ['noop'] }))._unsafeUnwrap();
      if (jobs.length > 0) (await queue.completeMany(jobs))._unsafeUnwrap();
      return jobs.length;
    },
  },
  leases: {
    tables: ['proto.jobs', 'proto.leases'],
    async prepare() {
      await monitor.query(PROTO_SCHEMA);
      await monitor.query(
        `INSERT INTO proto.jobs (task, payload) SELECT 'noop', '{}'::jsonb FROM generate_series(1, $1)`,
        [N],
      );
    },
    async step() {
      const { rows } = await pool.query(PROTO_CLAIM, [BATCH, 30_000, ['noop']]);
      if (rows.length > 0)
        await pool.query(PROTO_COMPLETE, [rows.map((r) => r.id), rows.map((r) => r.token)]);
      return rows.length;
    },
  },
};

async function tableStats(tables) {
  const r = await monitor.query(
    `SELECT sum(pg_relation_size(relid))::float8 AS heap, sum(pg_indexes_size(relid))::float8 AS indexes,
            sum(n_tup_upd)::float8 AS upd, sum(n_tup_hot_upd)::float8 AS hot, sum(n_dead_tup)::float8 AS dead
       FROM pg_stat_user_tables WHERE (schemaname || '.' || relname) = ANY($1)`,
    [tables],
  );
  return r.rows[0];
}

async function burnDown(design) {
  const d = designs[design];
  await d.prepare();
  await monitor.query(`VACUUM ANALYZE ${d.tables.join(', ')}`);
  const before = await tableStats(d.tables);
  let maxDead = 0;
  let done = false;
  const sampler = (async () => {
    while (!done) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      maxDead = Math.max(maxDead, (await tableStats(d.tables)).dead);
    }
  })();
  const s0 = serverCpu();
  const t0 = performance.now();
  let processed = 0;
  try {
    await Promise.all(
      Array.from({ length: LOOPS }, async () => {
        for (;;) {
          const n = await d.step();
          processed += n;
          if (n === 0) return;
        }
      }),
    );
  } finally {
    done = true;
    await sampler;
  }
  const seconds = (performance.now() - t0) / 1000;
  const serverUs = (serverCpu() - s0) / N;
  // The statistics collector reports with a delay: wait for this run's counts.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const after = await tableStats(d.tables);
  const r = {
    jobsPerSec: processed / seconds,
    serverUs,
    hotShare: (after.hot - before.hot) / Math.max(1, after.upd - before.upd),
    updates: after.upd - before.upd,
    maxDead,
    heapMB: after.heap / 2 ** 20,
    indexMB: after.indexes / 2 ** 20,
  };
  await monitor.query('VACUUM');
  return r;
}

const results = { current: [], leases: [] };
const load0 = loadavg()[0];
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const design of round % 2 === 0 ? ['current', 'leases'] : ['leases', 'current']) {
      const r = await burnDown(design);
      results[design].push(r);
      process.stderr.write(`round ${round + 1} ${design}: ${JSON.stringify(r)}\n`);
    }
  }
  console.log(
    `${N} no-op jobs per burn-down, ${LOOPS} loops × claim ${BATCH} + one completion, ${ROUNDS} interleaved rounds, load ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
  );
  console.log(
    '| design | jobs/s | server CPU µs/job | HOT / updates | max n_dead_tup | heap MB | indexes MB |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const [design, rs] of Object.entries(results)) {
    console.log(
      `| ${design} | ${span(
        rs.map((r) => r.jobsPerSec),
        0,
      )} | ${span(rs.map((r) => r.serverUs))} | ` +
        `${span(
          rs.map((r) => r.hotShare),
          2,
        )} | ${span(
          rs.map((r) => r.maxDead),
          0,
        )} | ` +
        `${span(rs.map((r) => r.heapMB))} | ${span(rs.map((r) => r.indexMB))} |`,
    );
  }
} finally {
  await pool.end();
  await monitor.end();
  await db.drop().catch(() => {});
  await server.stop();
}
