import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { countingPool } from '../fixtures/counting-pool.js';
import { eventually, leaks } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
// The queue's pool records every statement it is sent (to count prune's batches).
const counted = countingPool(url);
const countedTm = new TxManager(counted.pool);
afterAll(async () => {
  await counted.pool.end();
});
const tasks = { work: z.object({ n: z.number().int() }) };
let seq = 0;

async function freshQueue() {
  const queue = new Queue({
    pool: counted.pool,
    txManager: countedTm,
    schema: `q_retention_${++seq}`,
    tasks,
    archive: true,
  });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

/** Enqueues and completes `n` jobs (archived), then ages the first `old` of them: job k finished 8 days + k minutes ago. */
async function archived(queue: Queue, n: number, old: number): Promise<void> {
  (
    await queue.enqueueMany(
      pool,
      'work',
      Array.from({ length: n }, (_, i) => ({ n: i })),
    )
  )._unsafeUnwrap();
  const jobs = (await queue.claim({ batch: n }))._unsafeUnwrap();
  expect((await queue.completeMany(jobs))._unsafeUnwrap().completed).toHaveLength(n);
  await pool.query(
    `UPDATE ${queue.schema}.jobs_archive SET finished_at = now() - interval '8 days' - id * interval '1 minute'
      WHERE id <= $1`,
    [old],
  );
}

const count = async (sql: string) => (await pool.query<{ n: number }>(sql)).rows[0]?.n;
const pruneStatements = (from: number) =>
  counted.texts.slice(from).filter((t) => t.includes('doomed')).length;

afterEach(async () => {
  expect(await leaks(pool)).toEqual({ checkedOut: 0, idleInTransaction: 0 });
});

describe('prune', () => {
  it('deletes archived jobs older than the retention, oldest first, one bounded statement per batch, up to limit', async () => {
    const queue = await freshQueue();
    await archived(queue, 25, 20);
    let from = counted.texts.length;
    expect((await queue.prune({ olderThan: '7d', batch: 7, limit: 15 }))._unsafeUnwrap()).toEqual({
      archived: 15,
      dead: 0,
    });
    expect(pruneStatements(from)).toBe(3); // 7 + 7 + 1: never more than a batch per statement
    // The oldest went first: the highest ids (aged the most) are gone, ids 1..5 (old, but newer) remain.
    const left = await pool.query<{ id: string }>(`SELECT id FROM ${queue.schema}.jobs_archive ORDER BY id`);
    expect(left.rows.map((r) => Number(r.id))).toEqual([1, 2, 3, 4, 5, 21, 22, 23, 24, 25]);
    from = counted.texts.length;
    expect((await queue.prune({ olderThan: '7d', batch: 7 }))._unsafeUnwrap().archived).toBe(5);
    expect(pruneStatements(from)).toBe(1);
    expect((await queue.prune({ olderThan: '7d' }))._unsafeUnwrap().archived).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs_archive`)).toBe(5);
  });

  it("two pruners at once skip each other's rows (SKIP LOCKED) and delete each old job once", async () => {
    const queue = await freshQueue();
    await archived(queue, 60, 50);
    const [a, b] = await Promise.all([
      queue.prune({ olderThan: '7d', batch: 5 }),
      queue.prune({ olderThan: '7d', batch: 5 }),
    ]);
    expect(a!._unsafeUnwrap().archived + b!._unsafeUnwrap().archived).toBe(50);
    expect(await count(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs_archive`)).toBe(10);
  });

  it('deletes dead jobs dead for longer than deadOlderThan; pending, running and recent dead jobs stay', async () => {
    const queue = await freshQueue();
    (
      await queue.enqueueMany(
        pool,
        'work',
        [1, 2, 3, 4].map((n) => ({ n })),
        { maxAttempts: 1 },
      )
    )._unsafeUnwrap();
    for (const job of (await queue.claim({ batch: 4 }))._unsafeUnwrap())
      (await queue.fail(job, 'boom'))._unsafeUnwrap();
    (
      await queue.enqueueMany(
        pool,
        'work',
        [5, 6].map((n) => ({ n })),
      )
    )._unsafeUnwrap();
    const [running] = (await queue.claim())._unsafeUnwrap();
    // Jobs 1..3 died two days ago; the pending and running ones are as old, by updated_at.
    await pool.query(
      `UPDATE ${queue.schema}.jobs SET updated_at = now() - interval '2 days' WHERE id IN (1, 2, 3, 5, 6)`,
    );
    expect((await queue.prune({ deadOlderThan: '1d', batch: 2 }))._unsafeUnwrap()).toEqual({
      archived: 0,
      dead: 3,
    });
    const left = await pool.query(`SELECT id::int, state FROM ${queue.schema}.jobs ORDER BY id`);
    expect(left.rows).toEqual([
      { id: 4, state: 'dead' },
      { id: 5, state: 'running' },
      { id: 6, state: 'pending' },
    ]);
    (await queue.complete(running!))._unsafeUnwrap();
  });

  it('finds its batch through the indexes (jobs_archive_finished, jobs_dead_since), not a scan of the table', async () => {
    const queue = await freshQueue();
    const q = queue.schema;
    // A large archive of recent jobs and a few old ones: what a retention pass meets.
    await pool.query(
      `INSERT INTO ${q}.jobs_archive (id, task, payload, state, attempts, created_at, finished_at)
       SELECT g, 'work', '{}', 'done', 1, now(), now() - CASE WHEN g <= 10 THEN interval '30 days' ELSE interval '1 hour' END
         FROM generate_series(1, 20000) g`,
    );
    await pool.query(`ANALYZE ${q}.jobs_archive`);
    const plan = await pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN SELECT id FROM ${q}.jobs_archive WHERE finished_at < now() - 604800000::float8 * interval '1 millisecond'
        ORDER BY finished_at LIMIT 1000 FOR UPDATE SKIP LOCKED`,
    );
    expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('jobs_archive_finished');
    const dead = await pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN SELECT id FROM ${q}.jobs WHERE state = 'dead' AND updated_at < now() - interval '1 day'
        ORDER BY updated_at LIMIT 1000 FOR UPDATE SKIP LOCKED`,
    );
    expect(dead.rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('jobs_dead_since');
    expect((await queue.prune({ olderThan: '7d' }))._unsafeUnwrap().archived).toBe(10);
  });

  it('refuses bad options with InvalidOptions and sends nothing', async () => {
    const queue = await freshQueue();
    const from = counted.texts.length;
    const bad: unknown[] = [
      {},
      { olderThan: 'soon' },
      { olderThan: -1 },
      { olderThan: 0 },
      { olderThan: '40000d' },
      { olderThan: '7d', batch: 0 },
      { olderThan: '7d', limit: 1.5 },
      { olderThan: '7d', extra: true },
      { deadOlderThan: Number.NaN },
    ];
    for (const options of bad) {
      const r = await queue.prune(options as Parameters<Queue['prune']>[0]);
      expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    }
    expect(counted.texts.length).toBe(from);
  });

  it('a worker with a retention option prunes periodically, like the reaper', async () => {
    const queue = await freshQueue();
    await archived(queue, 6, 4);
    const errors: unknown[] = [];
    const worker = queue.work(
      { work: () => {} },
      { retention: { olderThan: '7d', every: '1s' }, hooks: { onError: (e) => errors.push(e) } },
    );
    await eventually(
      async () => (await count(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs_archive`)) === 2,
    );
    await worker.stop();
    expect(errors).toEqual([]);
    expect(() => queue.work({ work: () => {} }, { retention: { every: '1s' } })).toThrow(/olderThan/);
  });
});
