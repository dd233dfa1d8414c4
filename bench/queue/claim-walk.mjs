// What a held MVCC horizon does to the claim, in counts: a producer enqueues RATE no-op jobs a second for
// DURATION s, one worker (pg-txkit, worker defaults, concurrency 8) runs them, and another session holds a
// REPEATABLE READ snapshot open the whole time (PGTXKIT_WALK_HOLD=0: none). Every 5 s it reports the
// entries of jobs_claimable the server read per job run (pg_stat_user_indexes.idx_tup_read delta ÷ jobs
// run): the claim's walk over the entries that nothing can remove while the horizon is held. Counts, not
// times, so a loaded machine changes them little.
// Run: npm run build && node bench/queue/claim-walk.mjs
// Env: PGTXKIT_WALK_RATE (default 1000), PGTXKIT_WALK_SECONDS (default 40), PGTXKIT_WALK_HOLD (default 1),
// PGTXKIT_WALK_DIST=<a dist folder> (another build of pg-txkit, e.g. a copy of dist/ before a change).
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { z } from 'zod';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';

const RATE = Number(process.env.PGTXKIT_WALK_RATE ?? 1000);
const SECONDS = Number(process.env.PGTXKIT_WALK_SECONDS ?? 40);
const HOLD = process.env.PGTXKIT_WALK_HOLD !== '0';
const DIST = process.env.PGTXKIT_WALK_DIST;
const { Queue, TxManager } = await import(
  DIST === undefined ? '../../dist/index.js' : pathToFileURL(`${DIST}/index.js`).href
);

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'walk' });
const pool = new pg.Pool({ connectionString: db.url });
const admin = new pg.Pool({ connectionString: db.url, max: 2 });
const holder = new pg.Client({ connectionString: db.url });
let worker;
try {
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: 'walk',
    tasks: { noop: z.object({}) },
  });
  (await queue.migrate())._unsafeUnwrap();
  let ran = 0;
  worker = queue.work({ noop: () => void ran++ }, { concurrency: 8 });
  await holder.connect();
  if (HOLD) {
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
  }
  const read = async () =>
    Number(
      (
        await admin.query(
          `SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = 'walk' AND indexrelname = 'jobs_claimable'`,
        )
      ).rows[0].idx_tup_read,
    );
  const t0 = performance.now();
  let sent = 0;
  let last = { t: t0, read: await read(), ran: 0 };
  const windows = [];
  while (performance.now() - t0 < SECONDS * 1000) {
    const due = Math.floor(((performance.now() - t0) / 1000) * RATE) - sent;
    if (due > 0) {
      (
        await queue.enqueueMany(
          pool,
          'noop',
          Array.from({ length: due }, () => ({})),
        )
      )._unsafeUnwrap();
      sent += due;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
    if (performance.now() - last.t >= 5000) {
      const now = { t: performance.now(), read: await read(), ran };
      windows.push(((now.read - last.read) / Math.max(1, now.ran - last.ran)).toFixed(1));
      last = now;
    }
  }
  console.log(
    `${DIST ?? 'dist'}, ${RATE} jobs/s, snapshot ${HOLD ? 'held' : 'not held'}: entries of jobs_claimable read per job, 5 s windows: ${windows.join(', ')}`,
  );
} finally {
  await holder.end().catch(() => {});
  await worker?.stop();
  await pool.end();
  await admin.end();
  await db.drop().catch(() => {});
  await server.stop();
}
