import pg from 'pg';
import { z } from 'zod/v4';
import { Queue } from '../../queue/queue.js';
import { TxManager } from '../../tx/tx-manager.js';
import type { Scenario, ScenarioContext, ScenarioResult, SideResult } from '../scenario.js';

/** Runs `clients` loops at once, each with its own pg.Client; closes every client. */
async function withClients(
  url: string,
  clients: number,
  loop: (client: pg.Client, index: number) => Promise<void>,
) {
  const opened: pg.Client[] = [];
  try {
    for (let i = 0; i < clients; i++) {
      const c = new pg.Client({ connectionString: url });
      c.on('error', () => {});
      await c.connect();
      opened.push(c);
    }
    await Promise.all(opened.map((c, i) => loop(c, i)));
  } finally {
    await Promise.all(opened.map((c) => c.end().catch(() => {})));
  }
}

async function count(pool: pg.Pool, sql: string): Promise<number> {
  const r = await pool.query<{ n: number }>(sql);
  return r.rows[0]?.n ?? 0;
}

function side(operations: number, anomalies: number, startedAt: number): SideResult {
  const seconds = Math.max(0.001, (performance.now() - startedAt) / 1000);
  return { operations, anomalies, opsPerSec: Math.round(operations / seconds) };
}

/**
 * 'queue': N workers drain a job table. Naive: SELECT the first pending job, run it, then UPDATE it
 * to done — no lock between the read and the write, so workers that read at the same time run the
 * same job. Pattern: `Queue.claim` (MATERIALIZED CTE, FOR UPDATE SKIP LOCKED, lease) + `complete`.
 * Anomaly: a job run more than once.
 */
async function runQueue(context: ScenarioContext): Promise<ScenarioResult> {
  const jobs = Math.max(20, Math.round(400 * context.scale));
  const clients = Math.max(2, context.clients);
  const pool = new pg.Pool({ connectionString: context.url, max: clients + 2 });
  pool.on('error', () => {});
  let done = 0;
  const progress = () => context.onProgress(++done, jobs * 2);
  try {
    // Naive side.
    await pool.query(`CREATE TABLE naive_jobs (id int PRIMARY KEY, state text NOT NULL DEFAULT 'pending');
                      CREATE TABLE naive_runs (job_id int NOT NULL, worker int NOT NULL)`);
    await pool.query('INSERT INTO naive_jobs (id) SELECT g FROM generate_series(1, $1) g', [jobs]);
    let t0 = performance.now();
    await withClients(context.url, clients, async (c, worker) => {
      for (let i = 0; i < jobs * 2 && !context.signal.aborted; i++) {
        // No lock: every worker that reads before the UPDATE below commits sees the same job.
        const r = await c.query<{ id: number }>(
          `SELECT id FROM naive_jobs WHERE state = 'pending' ORDER BY id LIMIT 1`,
        );
        const id = r.rows[0]?.id;
        if (id === undefined) return;
        await c.query('INSERT INTO naive_runs (job_id, worker) VALUES ($1, $2)', [id, worker]); // "run" the job
        const u = await c.query(`UPDATE naive_jobs SET state = 'done' WHERE id = $1 AND state = 'pending'`, [
          id,
        ]);
        if (u.rowCount === 1) progress();
      }
    });
    const naiveRuns = await count(pool, 'SELECT count(*)::int AS n FROM naive_runs');
    const naive = side(
      naiveRuns,
      await count(pool, 'SELECT (count(*) - count(DISTINCT job_id))::int AS n FROM naive_runs'),
      t0,
    );

    // Pattern side.
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'demo_queue',
      tasks: { job: z.object({ n: z.number().int() }) },
    });
    (await queue.migrate())._unsafeUnwrap();
    await pool.query('CREATE TABLE queue_runs (job_id bigint NOT NULL, worker int NOT NULL)');
    (
      await queue.enqueueMany(
        pool,
        'job',
        Array.from({ length: jobs }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    t0 = performance.now();
    await Promise.all(
      Array.from({ length: clients }, async (_, worker) => {
        for (let i = 0; i < jobs * 2 && !context.signal.aborted; i++) {
          const claimed = (await queue.claim({ batch: 1, lease: '1m' }))._unsafeUnwrap();
          const job = claimed[0];
          if (job === undefined) return;
          await pool.query('INSERT INTO queue_runs (job_id, worker) VALUES ($1, $2)', [job.id, worker]);
          (await queue.complete(job))._unsafeUnwrap();
          progress();
        }
      }),
    );
    const queueRuns = await count(pool, 'SELECT count(*)::int AS n FROM queue_runs');
    const pattern = side(
      queueRuns,
      await count(pool, 'SELECT (count(*) - count(DISTINCT job_id))::int AS n FROM queue_runs'),
      t0,
    );
    return {
      naive,
      pattern,
      anomalyLabel: 'jobs run twice',
      note: `${jobs} jobs, ${clients} workers; naive = SELECT pending then UPDATE, pattern = claim (SKIP LOCKED) + complete`,
    };
  } finally {
    await pool.end();
  }
}

/**
 * 'queue-retry-sweep': posts whose channel publish failed are retried by every replica's
 * periodic sweep. Naive: each replica reads all unposted rows, publishes, marks them — replicas
 * publish the same post twice. Pattern: one row per short transaction with FOR UPDATE SKIP LOCKED,
 * bail on the first failure, no session locks: each post is published once, and a crashed replica's
 * row lock dies with its connection. Anomaly: a post published more than once.
 */
async function runRetrySweep(context: ScenarioContext): Promise<ScenarioResult> {
  const posts = Math.max(20, Math.round(300 * context.scale));
  const replicas = Math.max(2, context.clients);
  const pool = new pg.Pool({ connectionString: context.url, max: replicas * 2 + 2 });
  pool.on('error', () => {});
  let done = 0;
  const progress = () => context.onProgress(++done, posts * 2);
  // The "external" publish (a Telegram channel): a write that no transaction of ours can roll back.
  // Fails ~1 in 8 calls, deterministically per (post, attempt), like a flaky API.
  const attempts = new Map<string, number>();
  const publish = async (table: string, id: number, replica: number): Promise<boolean> => {
    const key = `${table}:${id}`;
    const attempt = (attempts.get(key) ?? 0) + 1;
    attempts.set(key, attempt);
    if ((id * 7 + attempt * 3) % 8 === 0) return false;
    await pool.query(`INSERT INTO ${table} (post_id, replica) VALUES ($1, $2)`, [id, replica]);
    return true;
  };
  try {
    await pool.query(`
      CREATE TABLE naive_posts (id int PRIMARY KEY, channel_posted_at timestamptz);
      CREATE TABLE naive_publications (post_id int NOT NULL, replica int NOT NULL);
      CREATE TABLE posts (id int PRIMARY KEY, channel_posted_at timestamptz);
      CREATE TABLE publications (post_id int NOT NULL, replica int NOT NULL);
      INSERT INTO naive_posts (id) SELECT g FROM generate_series(1, ${posts}) g;
      INSERT INTO posts (id) SELECT g FROM generate_series(1, ${posts}) g;`);
    const ticks = 20;

    // Naive: read every unposted row without a lock, publish, mark.
    let t0 = performance.now();
    for (let tick = 0; tick < ticks && !context.signal.aborted; tick++) {
      await withClients(context.url, replicas, async (c, replica) => {
        const r = await c.query<{ id: number }>(
          'SELECT id FROM naive_posts WHERE channel_posted_at IS NULL ORDER BY id',
        );
        for (const { id } of r.rows) {
          if (!(await publish('naive_publications', id, replica))) return; // bail on first failure
          const u = await c.query('UPDATE naive_posts SET channel_posted_at = now() WHERE id = $1', [id]);
          if (u.rowCount === 1) progress();
        }
      });
      if (
        (await count(pool, 'SELECT count(*)::int AS n FROM naive_posts WHERE channel_posted_at IS NULL')) ===
        0
      )
        break;
    }
    const naivePubs = await count(pool, 'SELECT count(*)::int AS n FROM naive_publications');
    const naive = side(
      naivePubs,
      await count(pool, 'SELECT (count(*) - count(DISTINCT post_id))::int AS n FROM naive_publications'),
      t0,
    );

    // Pattern: one row per short transaction, locked with SKIP LOCKED.
    t0 = performance.now();
    for (let tick = 0; tick < ticks && !context.signal.aborted; tick++) {
      await withClients(context.url, replicas, async (c, replica) => {
        for (let i = 0; i < posts; i++) {
          await c.query('BEGIN');
          try {
            // FOR UPDATE SKIP LOCKED: take the first row nobody else holds; the row lock lasts only for
            // this short transaction and is released by the server if the connection dies.
            const r = await c.query<{ id: number }>(
              `SELECT id FROM posts WHERE channel_posted_at IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`,
            );
            const id = r.rows[0]?.id;
            if (id === undefined) {
              await c.query('COMMIT');
              return;
            }
            if (!(await publish('publications', id, replica))) {
              await c.query('ROLLBACK');
              return; // bail on first failure: the next tick (or another replica) retries it
            }
            await c.query('UPDATE posts SET channel_posted_at = now() WHERE id = $1', [id]);
            await c.query('COMMIT');
            progress();
          } catch (e) {
            await c.query('ROLLBACK').catch(() => {});
            throw e;
          }
        }
      });
      if ((await count(pool, 'SELECT count(*)::int AS n FROM posts WHERE channel_posted_at IS NULL')) === 0)
        break;
    }
    const pubs = await count(pool, 'SELECT count(*)::int AS n FROM publications');
    const pattern = side(
      pubs,
      await count(pool, 'SELECT (count(*) - count(DISTINCT post_id))::int AS n FROM publications'),
      t0,
    );
    const leftNaive = await count(
      pool,
      'SELECT count(*)::int AS n FROM naive_posts WHERE channel_posted_at IS NULL',
    );
    const leftPattern = await count(
      pool,
      'SELECT count(*)::int AS n FROM posts WHERE channel_posted_at IS NULL',
    );
    return {
      naive,
      pattern,
      anomalyLabel: 'posts published twice',
      note: `${posts} posts, ${replicas} replicas, flaky publish; unposted at the end: naive ${leftNaive}, pattern ${leftPattern}`,
    };
  } finally {
    await pool.end();
  }
}

/** The queue module's demo scenarios. */
export const scenarios: Scenario[] = [
  {
    id: 'queue',
    title: 'Job queue: N workers, each job once',
    pattern: 'Queue.claim (SKIP LOCKED)',
    run: runQueue,
  },
  {
    id: 'queue-retry-sweep',
    title: 'Retry sweep across replicas',
    pattern: 'FOR UPDATE SKIP LOCKED sweep',
    run: runRetrySweep,
  },
];
