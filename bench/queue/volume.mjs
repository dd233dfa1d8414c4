// Queue at volume: a burn-down of N jobs (default 1,000,000) by 2 workers with default options, in this
// process, sampling every 2 s the jobs table's heap and index sizes, n_live_tup / n_dead_tup, HOT
// updates and autovacuum runs. Then a steady phase: enqueue and process at the same time for the same
// number of jobs. Prints one line per sample (JSON) and a summary.
// Run: npm run build && node bench/queue/volume.mjs   (PGTXKIT_VOLUME_JOBS=200000 for a smaller run)
import pg from 'pg';
import { z } from 'zod';
import { Queue, TxManager } from '../../dist/index.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';

const N = Number(process.env.PGTXKIT_VOLUME_JOBS ?? 1_000_000);
const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'volume' });
const pool = new pg.Pool({ connectionString: db.url });
const monitor = new pg.Pool({ connectionString: db.url, max: 1 });
const queue = new Queue({
  pool,
  txManager: new TxManager(pool),
  schema: 'vol',
  tasks: { noop: z.object({}) },
});
(await queue.migrate())._unsafeUnwrap();

const settings = await monitor.query(
  `SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'autovacuum_naptime',
     'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay', 'autovacuum_vacuum_threshold')`,
);
const reloptions = await monitor.query(`SELECT reloptions FROM pg_class WHERE oid = 'vol.jobs'::regclass`);
console.log(
  JSON.stringify({
    server: Object.fromEntries(settings.rows.map((r) => [r.name, r.setting])),
    jobs: reloptions.rows[0],
  }),
);

const t0 = performance.now();
async function sample(phase) {
  const r = await monitor.query(
    `SELECT pg_relation_size('vol.jobs') AS heap, pg_indexes_size('vol.jobs') AS indexes,
            s.n_live_tup AS live, s.n_dead_tup AS dead, s.n_tup_upd AS upd, s.n_tup_hot_upd AS hot,
            s.autovacuum_count AS autovacuums, s.autoanalyze_count AS autoanalyzes,
            (SELECT count(*) FROM vol.jobs) AS rows
       FROM pg_stat_user_tables s WHERE s.relid = 'vol.jobs'::regclass`,
  );
  const row = r.rows[0];
  const out = {
    phase,
    s: Math.round((performance.now() - t0) / 1000),
    rows: Number(row.rows),
    heapMB: +(row.heap / 2 ** 20).toFixed(1),
    indexMB: +(row.indexes / 2 ** 20).toFixed(1),
    live: Number(row.live),
    dead: Number(row.dead),
    updates: Number(row.upd),
    hot: Number(row.hot),
    autovacuums: Number(row.autovacuums),
  };
  console.log(JSON.stringify(out));
  return out;
}

// Phase 1: enqueue N, burn down with 2 default workers.
for (let done = 0; done < N; done += 10_000) {
  (
    await queue.enqueueMany(
      pool,
      'noop',
      Array.from({ length: Math.min(10_000, N - done) }, () => ({})),
    )
  )._unsafeUnwrap();
}
await sample('enqueued');
let processed = 0;
const workers = [0, 1].map(() => queue.work({ noop: () => void processed++ }, { concurrency: 8 }));
const burn0 = performance.now();
for (;;) {
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const s = await sample('burn-down');
  if (s.rows === 0) break;
}
const burnSeconds = (performance.now() - burn0) / 1000;

// Phase 2: steady — a producer enqueues N more in batches of 1,000 while the workers run.
const steady0 = performance.now();
let enqueued = 0;
const producer = (async () => {
  while (enqueued < N) {
    (
      await queue.enqueueMany(
        pool,
        'noop',
        Array.from({ length: 1000 }, () => ({})),
      )
    )._unsafeUnwrap();
    enqueued += 1000;
  }
})();
let last;
for (;;) {
  await new Promise((resolve) => setTimeout(resolve, 2000));
  last = await sample('steady');
  if (enqueued >= N && last.rows === 0) break;
}
await producer;
const steadySeconds = (performance.now() - steady0) / 1000;
await Promise.all(workers.map((w) => w.stop()));
console.log(
  JSON.stringify({
    jobs: N,
    processed,
    burnDownJobsPerSec: Math.round(N / burnSeconds),
    steadyJobsPerSec: Math.round(N / steadySeconds),
    final: last,
  }),
);
await pool.end();
await monitor.end();
await db.drop();
await server.stop();
