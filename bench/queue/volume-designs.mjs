// Queue table designs at volume, side by side in ONE run with interleaved rounds (A B C … A B C …):
//   A     the current design: the real Queue's migrations (Queue.migrate() from dist) and its claim
//         function; complete is the Queue's fenced DELETE. The claim's UPDATE changes `state`, which
//         every partial index names, so it can never be HOT.
//   B     a leases table: a job row is never updated at claim. The claim inserts a lease row
//         (job id, token, expiry); a job is running while it has one. complete deletes the job and
//         then its lease in one statement. The claimable index still holds leased jobs, so each claim steps
//         over them at the head of the index (one probe of the leases primary key each).
//   A0    A with autovacuum_vacuum_cost_delay = 0 on the jobs table (autovacuum not throttled).
//   Anl   A without the reaper's index jobs_leases (what that index costs the claim).
//   C<ff> a claim that leaves indexed columns alone: `state` and the lease columns are in no index; the
//         indexes' predicates name `dead_at` (NULL while a job is live), which the claim never changes,
//         and the jobs table has fillfactor <ff> so the claim's new row version can stay on its page
//         (HOT). The claimable index holds running jobs too: the claim steps over them (a heap check).
// Every design is driven by the same hand-written loop (not the Queue's worker), so the figures compare
// table designs, not client code: LOOPS connections, each claims CLAIM jobs, then completes the batch
// it claimed before (so about LOOPS × CLAIM × 2 jobs are leased at any time, as with prefetch).
// Per design and round: a burn-down of N jobs, then a steady phase (a producer enqueues N more in
// batches of 1,000 while the loops run). Throughput = N ÷ the time until the loops completed them.
// Every 2 s it samples heap and index sizes, n_dead_tup, updates, HOT updates and autovacuum runs; then the cost of a claim with HELD jobs leased at the head.
// Prints one JSON line per sample and per run, then a table: medians (min–max) over the rounds.
// Run: npm run build && node bench/queue/volume-designs.mjs
//   (docs/queue.md's figures: PGTXKIT_DESIGNS=A,B,C70,C100 / A,A0,Anl,C100 / A,B,C70,C100,A0)
//   env: PGTXKIT_DESIGNS_JOBS (200000), PGTXKIT_DESIGNS_ROUNDS (2), PGTXKIT_DESIGNS (A,B,C70),
//        PGTXKIT_DESIGNS_NAPTIME (10s: the server's autovacuum_naptime, so autovacuum runs within a run)
import pg from 'pg';
import { z } from 'zod';
import { Queue, TxManager } from '../../dist/index.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';

const N = Number(process.env.PGTXKIT_DESIGNS_JOBS ?? 200_000);
const ROUNDS = Number(process.env.PGTXKIT_DESIGNS_ROUNDS ?? 2);
const DESIGNS = (process.env.PGTXKIT_DESIGNS ?? 'A,B,C70').split(',');
const NAPTIME = process.env.PGTXKIT_DESIGNS_NAPTIME ?? '10s';
const LOOPS = 4;
const CLAIM = 32;
const LEASE_MS = 60_000;
const HELD = [0, 1_000, 10_000];

const server = await startPostgres({ settings: { autovacuum_naptime: NAPTIME } });
const db = await createTestDatabase(server.url, { prefix: 'designs' });
const pool = new pg.Pool({ connectionString: db.url, max: LOOPS + 2 });
const monitor = new pg.Pool({ connectionString: db.url, max: 1 });

/** Each design: its schema, its claim (returns id + token rows) and its complete (ids, tokens). */
const designs = {
  A: {
    tables: ['jobs'],
    async create(s) {
      const queue = new Queue({
        pool,
        txManager: new TxManager(pool),
        schema: s,
        tasks: { noop: z.object({}) },
      });
      (await queue.migrate())._unsafeUnwrap();
    },
    claim: (s) => `SELECT id, lease_token AS token FROM "${s}".claim_jobs($1::int, $2::float8, $3::text[])`,
    // The Queue's complete (queue-sql.ts) without the archive branch: fenced by id + token + state.
    complete: (s) => `
      DELETE FROM "${s}".jobs j USING unnest($1::bigint[], $2::uuid[]) AS i(id, token)
       WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'`,
  },
  B: {
    tables: ['jobs', 'leases'],
    async create(s) {
      await pool.query(`
        CREATE SCHEMA "${s}";
        -- As the current jobs table, without the lease columns: state is 'pending' or 'dead'; a pending
        -- job with a lease row is running. attempts counts finished attempts (fail and the reaper add
        -- one); the lease carries the attempt number, so a claim never writes the job row.
        CREATE TABLE "${s}".jobs (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          task text NOT NULL, payload jsonb NOT NULL,
          state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'dead')),
          priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
          attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 5,
          backoff_base_ms integer NOT NULL DEFAULT 1000, backoff_cap_ms integer NOT NULL DEFAULT 3600000,
          key text, last_error text, progress jsonb,
          created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now()
        ) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
                autovacuum_vacuum_insert_scale_factor = 0.02);
        CREATE INDEX jobs_claimable ON "${s}".jobs (priority, run_at, id) WHERE state = 'pending';
        CREATE UNIQUE INDEX jobs_key ON "${s}".jobs (task, key) WHERE key IS NOT NULL AND state = 'pending';
        CREATE INDEX jobs_dead ON "${s}".jobs (task, id) WHERE state = 'dead';
        CREATE INDEX jobs_dead_since ON "${s}".jobs (updated_at) WHERE state = 'dead';
        -- One row per running job: small (concurrency × prefetch rows), so the reaper scans it whole and
        -- it needs no index on expires_at (a heartbeat's UPDATE of expires_at can then be HOT).
        CREATE TABLE "${s}".leases (
          job_id bigint PRIMARY KEY, token uuid NOT NULL, expires_at timestamptz NOT NULL,
          attempt integer NOT NULL
        ) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
        -- Lock: FOR UPDATE SKIP LOCKED on the chosen job rows (a row lock, no new row version), then
        -- ROW EXCLUSIVE on leases for the INSERT. A claimer whose snapshot predates another's lease
        -- can lock the same job after that commit; ON CONFLICT DO NOTHING drops it from its batch.
        CREATE FUNCTION "${s}".claim_jobs(n integer, lease_ms double precision, tasks text[])
          RETURNS TABLE (id bigint, token uuid) LANGUAGE sql VOLATILE SET enable_sort = off AS $$
          WITH c AS MATERIALIZED (
            SELECT j.id, j.attempts FROM "${s}".jobs j
             WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
               AND NOT EXISTS (SELECT 1 FROM "${s}".leases l WHERE l.job_id = j.id)
             ORDER BY j.priority, j.run_at, j.id
             LIMIT n
             FOR UPDATE OF j SKIP LOCKED
          )
          INSERT INTO "${s}".leases (job_id, token, expires_at, attempt)
          SELECT c.id, gen_random_uuid(), now() + lease_ms * interval '1 millisecond', c.attempts + 1 FROM c
          ON CONFLICT (job_id) DO NOTHING
          RETURNING job_id, token
        $$;`);
    },
    claim: (s) => `SELECT id, token FROM "${s}".claim_jobs($1::int, $2::float8, $3::text[])`,
    // Lock: FOR UPDATE (DELETE) on each job whose lease is still held under its token, then on the
    // lease row. Fenced by the lease token: a lost lease deletes nothing. The job goes first: deleting
    // the lease first deadlocks with a claim whose snapshot predates that lease (it locked the job and
    // waits, in the leases primary key, for the lease's deletion to commit, while this DELETE waits for
    // its row lock on the job): 40P01, seen in the first 200k-job run.
    complete: (s) => `
      WITH j AS (
        DELETE FROM "${s}".jobs j USING unnest($1::bigint[], $2::uuid[]) AS i(id, token), "${s}".leases l
         WHERE j.id = i.id AND l.job_id = i.id AND l.token = i.token
        RETURNING j.id
      )
      DELETE FROM "${s}".leases l USING j WHERE l.job_id = j.id`,
  },
};

/** Design C at a fillfactor: the claim changes no indexed column (dead_at is what the predicates name). */
function designC(fillfactor) {
  return {
    tables: ['jobs'],
    async create(s) {
      await pool.query(`
        CREATE SCHEMA "${s}";
        CREATE TABLE "${s}".jobs (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          task text NOT NULL, payload jsonb NOT NULL,
          state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'dead')),
          priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
          attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 5,
          backoff_base_ms integer NOT NULL DEFAULT 1000, backoff_cap_ms integer NOT NULL DEFAULT 3600000,
          key text, lease_token uuid, lease_expires_at timestamptz, last_error text, progress jsonb,
          created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(),
          -- set when the job dies, NULL while it is live; the only column the indexes' predicates name
          dead_at timestamptz,
          CHECK ((state = 'dead') = (dead_at IS NOT NULL))
        ) WITH (fillfactor = ${fillfactor}, autovacuum_vacuum_scale_factor = 0.02,
                autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);
        CREATE INDEX jobs_claimable ON "${s}".jobs (priority, run_at, id) WHERE dead_at IS NULL;
        CREATE UNIQUE INDEX jobs_key ON "${s}".jobs (task, key) WHERE key IS NOT NULL AND dead_at IS NULL;
        CREATE INDEX jobs_dead ON "${s}".jobs (task, id) WHERE dead_at IS NOT NULL;
        CREATE INDEX jobs_dead_since ON "${s}".jobs (dead_at) WHERE dead_at IS NOT NULL;
        -- Lock: FOR UPDATE SKIP LOCKED on the chosen pending rows (as the current claim). state,
        -- attempts, the lease columns and updated_at are in no index: the UPDATE can be HOT.
        CREATE FUNCTION "${s}".claim_jobs(n integer, lease_ms double precision, tasks text[])
          RETURNS TABLE (id bigint, token uuid) LANGUAGE sql VOLATILE SET enable_sort = off AS $$
          WITH c AS MATERIALIZED (
            SELECT j.id FROM "${s}".jobs j
             WHERE j.dead_at IS NULL AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
             ORDER BY j.priority, j.run_at, j.id
             LIMIT n
             FOR UPDATE SKIP LOCKED
          )
          UPDATE "${s}".jobs j
             SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
                 lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
            FROM c WHERE j.id = c.id
          RETURNING j.id, j.lease_token
        $$;`);
    },
    claim: (s) => `SELECT id, token FROM "${s}".claim_jobs($1::int, $2::float8, $3::text[])`,
    complete: designs.A.complete,
  };
}
for (const d of DESIGNS) if (d.startsWith('C')) designs[d] = designC(Number(d.slice(1)));
// A0: the current design with its autovacuum unthrottled on the jobs table (cost delay 0 instead of the
// server's 2 ms), to see whether the throttle is what lets dead tuples pile up.
designs.A0 = {
  ...designs.A,
  async create(s) {
    await designs.A.create(s);
    // Lock: SHARE UPDATE EXCLUSIVE on jobs (a table setting; the table is empty here).
    await pool.query(`ALTER TABLE "${s}".jobs SET (autovacuum_vacuum_cost_delay = 0)`);
  },
};
// Anl: the current design without the reaper's index jobs_leases, to see what that index costs the
// claim (design C has no index on the lease: one would make its claim non-HOT again).
designs.Anl = {
  ...designs.A,
  async create(s) {
    await designs.A.create(s);
    // Lock: ACCESS EXCLUSIVE on jobs (the table is empty here).
    await pool.query(`DROP INDEX "${s}".jobs_leases`);
  },
};

const settings = await monitor.query(
  `SELECT name, setting FROM pg_settings WHERE name IN ('server_version', 'autovacuum_naptime',
     'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay', 'autovacuum_max_workers')`,
);
console.log(
  JSON.stringify({
    N,
    ROUNDS,
    DESIGNS,
    LOOPS,
    CLAIM,
    server: Object.fromEntries(settings.rows.map((r) => [r.name, r.setting])),
  }),
);
const load = () => import('node:os').then((os) => os.loadavg().map((l) => +l.toFixed(2)));

async function enqueue(client, s, n) {
  // Lock: ROW EXCLUSIVE on jobs (the same INSERT for every design).
  await client.query(
    `INSERT INTO "${s}".jobs (task, payload) SELECT 'noop', '{}'::jsonb FROM generate_series(1, $1)`,
    [n],
  );
}

async function sample(s, tables, phase, t0) {
  const r = await monitor.query(
    `SELECT c.relname, pg_relation_size(c.oid) AS heap, pg_indexes_size(c.oid) AS indexes,
            t.n_live_tup AS live, t.n_dead_tup AS dead, t.n_tup_upd AS upd, t.n_tup_hot_upd AS hot,
            t.autovacuum_count AS av
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_stat_user_tables t ON t.relid = c.oid
      WHERE n.nspname = $1 AND c.relname = ANY($2)`,
    [s, tables],
  );
  const rows = await monitor.query(`SELECT count(*)::int AS n FROM "${s}".jobs`);
  const by = Object.fromEntries(r.rows.map((x) => [x.relname, x]));
  const sum = (f) => r.rows.reduce((a, x) => a + Number(x[f]), 0);
  const out = {
    s,
    phase,
    t: Math.round((performance.now() - t0) / 1000),
    rows: rows.rows[0].n,
    heapMB: +(sum('heap') / 2 ** 20).toFixed(1),
    indexMB: +(sum('indexes') / 2 ** 20).toFixed(1),
    dead: sum('dead'),
    jobsUpd: Number(by.jobs.upd),
    jobsHot: Number(by.jobs.hot),
    autovacuums: Object.fromEntries(r.rows.map((x) => [x.relname, Number(x.av)])),
  };
  console.log(JSON.stringify(out));
  return out;
}

/** LOOPS claim loops: claim a batch, complete the one claimed before; until stop() and empty. */
function startLoops(d, s) {
  let stopping = false;
  let processed = 0;
  const claimSql = d.claim(s);
  const completeSql = d.complete(s);
  const loops = Array.from({ length: LOOPS }, async () => {
    const client = await pool.connect();
    try {
      let prev = [];
      for (;;) {
        const got = (await client.query(claimSql, [CLAIM, LEASE_MS, ['noop']])).rows;
        if (prev.length > 0) {
          await client.query(completeSql, [prev.map((r) => r.id), prev.map((r) => r.token)]);
          processed += prev.length;
        }
        prev = got;
        if (got.length === 0) {
          if (stopping) break;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      }
    } finally {
      client.release();
    }
  });
  return {
    processed: () => processed,
    stop: async () => {
      stopping = true;
      await Promise.all(loops);
    },
  };
}

/** Samples every 2 s until stopped (in the background of a phase). */
function startSampler(s, tables, phase, t0, samples) {
  let stopped = false;
  const done = (async () => {
    while (!stopped) {
      await new Promise((resolve) => setTimeout(resolve, 2000));
      if (!stopped) samples.push(await sample(s, tables, phase, t0));
    }
  })();
  return async () => {
    stopped = true;
    await done;
  };
}

/** Waits (polling every 20 ms) until the loops have processed `target` jobs. */
async function waitProcessed(loops, target) {
  while (loops.processed() < target) await new Promise((resolve) => setTimeout(resolve, 20));
}

/** The cost of one claim of CLAIM jobs with `held` jobs leased at the head of the queue (median µs of 100). */
async function claimCost(d, s, held) {
  const client = await pool.connect();
  try {
    await enqueue(client, s, held + 100 * CLAIM);
    await client.query(`ANALYZE "${s}".jobs`);
    const claimSql = d.claim(s);
    const completeSql = d.complete(s);
    for (let h = 0; h < held; h += 1000)
      await client.query(claimSql, [Math.min(1000, held - h), LEASE_MS, ['noop']]);
    const times = [];
    for (let i = 0; i < 100; i++) {
      const t = process.hrtime.bigint();
      const got = (await client.query(claimSql, [CLAIM, LEASE_MS, ['noop']])).rows;
      times.push(Number(process.hrtime.bigint() - t) / 1000);
      await client.query(completeSql, [got.map((r) => r.id), got.map((r) => r.token)]);
    }
    times.sort((a, b) => a - b);
    return Math.round(times[50]);
  } finally {
    client.release();
  }
}

async function run(name, round) {
  const d = designs[name];
  const s = `${name.toLowerCase()}_r${round}`;
  await d.create(s);
  const client = await pool.connect();
  const samples = [];
  const t0 = performance.now();
  try {
    for (let done = 0; done < N; done += 10_000) await enqueue(client, s, Math.min(10_000, N - done));
  } finally {
    client.release();
  }
  samples.push(await sample(s, d.tables, 'enqueued', t0));
  const loops = startLoops(d, s);
  const burn0 = performance.now();
  let stopSampler = startSampler(s, d.tables, 'burn-down', t0, samples);
  await waitProcessed(loops, N);
  const burnSeconds = (performance.now() - burn0) / 1000;
  await stopSampler();
  const steady0 = performance.now();
  stopSampler = startSampler(s, d.tables, 'steady', t0, samples);
  const c = await pool.connect();
  try {
    for (let enqueued = 0; enqueued < N; enqueued += 1000) await enqueue(c, s, 1000);
  } finally {
    c.release();
  }
  await waitProcessed(loops, 2 * N);
  const steadySeconds = (performance.now() - steady0) / 1000;
  await stopSampler();
  await loops.stop();
  await new Promise((resolve) => setTimeout(resolve, 1500)); // let the backends flush their statistics
  const last = await sample(s, d.tables, 'done', t0);
  samples.push(last);
  const cost = {};
  for (const held of HELD) cost[held] = await claimCost(d, s, held);
  const result = {
    design: name,
    round,
    load: await load(),
    burnJobsPerSec: Math.round(N / burnSeconds),
    steadyJobsPerSec: Math.round(N / steadySeconds),
    hotRatio: last.jobsUpd === 0 ? null : +(last.jobsHot / last.jobsUpd).toFixed(3),
    jobsUpdates: last.jobsUpd,
    peakHeapMB: Math.max(...samples.map((x) => x.heapMB)),
    peakIndexMB: Math.max(...samples.map((x) => x.indexMB)),
    peakDead: Math.max(...samples.map((x) => x.dead)),
    autovacuums: last.autovacuums,
    claimMicros: cost,
  };
  console.log(JSON.stringify(result));
  await pool.query(`DROP SCHEMA "${s}" CASCADE`);
  return result;
}

console.log(JSON.stringify({ start: new Date().toISOString(), load: await load() }));
const results = [];
for (let round = 1; round <= ROUNDS; round++)
  for (const name of DESIGNS) results.push(await run(name, round));

const med = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  return `${+m.toFixed(3)} (${s[0]}–${s[s.length - 1]})`;
};
console.log(
  '\n| design | burn-down jobs/s | steady jobs/s | HOT ratio | peak heap MB | peak index MB | peak n_dead_tup | claim µs, held ' +
    HELD.join(' / ') +
    ' |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const name of DESIGNS) {
  const rs = results.filter((r) => r.design === name);
  const pick = (f) => med(rs.map(f));
  console.log(
    `| ${name} | ${pick((r) => r.burnJobsPerSec)} | ${pick((r) => r.steadyJobsPerSec)} | ${rs[0].hotRatio === null ? 'no updates' : pick((r) => r.hotRatio)} | ${pick((r) => r.peakHeapMB)} | ${pick((r) => r.peakIndexMB)} | ${pick((r) => r.peakDead)} | ${HELD.map((h) => pick((r) => r.claimMicros[h])).join(' / ')} |`,
  );
}
const baseline = results.filter((r) => r.design === DESIGNS[0]);
for (const name of DESIGNS.slice(1)) {
  const rs = results.filter((r) => r.design === name);
  const ratio = (f) => med(rs.map((r, i) => +(f(r) / f(baseline[i])).toFixed(2)));
  console.log(
    `${name} ÷ ${DESIGNS[0]} (same round): burn-down ${ratio((r) => r.burnJobsPerSec)}, steady ${ratio((r) => r.steadyJobsPerSec)}`,
  );
}
console.log(JSON.stringify({ end: new Date().toISOString(), load: await load() }));
await pool.end();
await monitor.end();
await db.drop();
await server.stop();
