// A retry sweep of failed publications across replicas, done the way that survives serverless Postgres.
//
//   DATABASE_URL=postgres://… node --experimental-strip-types examples/queue-retry-sweep.ts   (or tsx)
//
// Posts whose channel publish failed (channel_posted_at IS NULL) are retried by whichever replica's
// cron tick comes next. No session advisory lock (it leaks when lock and unlock land on different pooled
// clients, or when the provider's proxy cuts the TCP connection while it is held). Instead:
// - one row per SHORT transaction, taken with FOR UPDATE SKIP LOCKED: replicas running the sweep at the
//   same time take different rows, never wait for each other, never publish the same post twice;
// - the row lock is released by COMMIT/ROLLBACK — or by the server when the connection dies;
// - bail on the first failure: do not hammer a failing API; the next tick (or replica) retries.
// Trade-off: the publish call runs inside the short transaction, holding one row lock
// and one connection for its duration. For slow calls, use the Queue instead (claim with a lease, call
// the API with no transaction open, complete fenced by the lease token) — see examples/queue-worker.ts.
import pg from 'pg';
import { startPostgres } from '../src/testing/start-postgres.js';

/** Publishes one post to the channel; false when the API failed. (A stand-in for Telegram.) */
async function publishToChannel(post: { id: number; title: string }): Promise<boolean> {
  const ok = Math.random() > 0.2;
  console.log(`${ok ? 'published' : 'FAILED   '} post ${post.id} "${post.title}"`);
  return ok;
}

/**
 * One sweep: publishes unposted posts one at a time; returns how many it published. Safe to run from
 * every replica at once.
 */
export async function retryChannelPosts(pool: pg.Pool): Promise<number> {
  const client = await pool.connect();
  let published = 0;
  let broken: Error | undefined;
  try {
    for (let i = 0; i < 1000; i++) {
      await client.query('BEGIN');
      // Row lock (FOR UPDATE) on the first unposted post nobody else holds; SKIP LOCKED skips rows other
      // replicas are publishing right now instead of waiting for them.
      const { rows } = await client.query<{ id: number; title: string }>(
        `SELECT id, title FROM blog_posts
          WHERE published AND channel_posted_at IS NULL
          ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED`,
      );
      const post = rows[0];
      if (post === undefined) {
        await client.query('COMMIT');
        return published;
      }
      if (!(await publishToChannel(post))) {
        await client.query('ROLLBACK'); // lock released, channel_posted_at stays NULL
        return published; // bail on first failure
      }
      await client.query('UPDATE blog_posts SET channel_posted_at = now() WHERE id = $1', [post.id]);
      await client.query('COMMIT');
      published++;
    }
    return published;
  } catch (e) {
    // If the connection died, the server already rolled back and released the row lock.
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    });
    throw e;
  } finally {
    client.release(broken);
  }
}

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 8 });
await pool.query(`
  CREATE TABLE IF NOT EXISTS blog_posts (
    id serial PRIMARY KEY, title text NOT NULL, published boolean NOT NULL DEFAULT true,
    channel_posted_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());
  INSERT INTO blog_posts (title) SELECT 'post ' || g FROM generate_series(1, 12) g;`);
// Three replicas' cron ticks, at the same time, a few times over.
for (let tick = 1; tick <= 5; tick++) {
  const counts = await Promise.all([
    retryChannelPosts(pool),
    retryChannelPosts(pool),
    retryChannelPosts(pool),
  ]);
  const { rows } = await pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM blog_posts WHERE channel_posted_at IS NULL',
  );
  console.log(`tick ${tick}: replicas published ${counts.join(' + ')}; still unposted: ${rows[0]?.n}`);
  if (rows[0]?.n === 0) break;
}
await pool.end();
await server?.stop();
