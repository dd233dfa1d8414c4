// A fresh queue schema `q` with one task (`noop`) and a backlog, for the benchmarks that measure the
// queue's statements in one connection (claim-by-tid.mjs, serial-groups-prototype.mjs,
// take-over.mjs).
import { z } from 'zod';
import { Queue, TxManager } from '../../dist/index.js';
import { queueStatements } from '../../dist/queue/store/queue-sql.js';

/**
 * Drops and re-creates schema `q` at the newest version, runs `sql` (a variant of the queue's functions)
 * if given, enqueues `jobs` no-op jobs (spread round-robin over `groups` groups when it is > 0) and
 * VACUUM ANALYZEs the table (fresh statistics). Returns the queue and its statements.
 *
 * @example
 * const { queue, statements } = await filledQueue(pool, { jobs: 50_000 });
 */
export async function filledQueue(pool, { jobs, groups = 0, sql }) {
  await pool.query('DROP SCHEMA IF EXISTS q CASCADE');
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: 'q',
    tasks: { noop: z.object({}) },
  });
  (await queue.migrate())._unsafeUnwrap();
  if (sql !== undefined) await pool.query(sql);
  for (let done = 0; done < jobs; done += 10_000) {
    const chunk = Array.from({ length: Math.min(10_000, jobs - done) }, () => ({}));
    const keys = chunk.map((_, i) => `g${(done + i) % groups}`);
    (await queue.enqueueMany(pool, 'noop', chunk, groups > 0 ? { groups: keys } : {}))._unsafeUnwrap();
  }
  await pool.query('VACUUM ANALYZE q.jobs');
  const statements = queueStatements('q', {
    archive: false,
    channel: 'q_jobs',
    cancelChannel: 'q_jobs_cancel',
  });
  return { queue, statements };
}
