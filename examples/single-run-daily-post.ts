// A daily generated post, done so that it happens exactly once and is never claimed by a replica
// that cannot finish it.
//
//   DATABASE_URL=postgres://… node --experimental-strip-types examples/single-run-daily-post.ts   (or tsx)
//   (without DATABASE_URL an embedded PostgreSQL is started and removed)
//
// Cron fires on several replicas at once (a deploy runs old and new side by side; a developer's laptop
// points at the production database without the publish token). Each replica calls the same job:
// - singleRun(name 'daily-post', key = the UTC day): a transaction-scoped try-lock stops two replicas
//   from generating at the same time (LockBusy), and a run record with a primary key on (name, key),
//   written in the SAME transaction as the post, makes it once (AlreadyDone afterwards) — a lock is not
//   idempotency. Nothing leaks if a connection dies: COMMIT/ROLLBACK (or the server) releases the lock.
// - A replica without publish credentials returns an Err BEFORE doing anything: nothing is recorded,
//   so a replica that can publish does the job on its tick (a laptop without the token once won the production lock this way).
// - Publishing is an external call: it is NOT done inside the generating transaction. The post and one
//   `deliveries` row per channel are written together (an outbox); replicas with credentials deliver
//   them one row per short transaction with FOR UPDATE SKIP LOCKED (no session locks, no duplicates).
import { err, ok } from 'neverthrow';
import pg from 'pg';
import { migrateSingleRun, singleRun } from '../src/advisory/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';
import { TxManager } from '../src/tx/tx-manager.js';

/** The domain error of a replica that must not claim the job. */
class CannotPublish extends Error {
  readonly kind = 'CannotPublish' as const;
}

interface Replica {
  readonly name: string;
  readonly publishToken: string | undefined;
}

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 8 });
const tm = new TxManager(pool);

const singleRunTable = await migrateSingleRun(pool);
if (singleRunTable.isErr()) throw singleRunTable.error;
await pool.query(`CREATE TABLE IF NOT EXISTS blog_posts (id serial PRIMARY KEY, day text UNIQUE NOT NULL, body text NOT NULL);
                  CREATE TABLE IF NOT EXISTS deliveries (post_id int NOT NULL REFERENCES blog_posts, channel text NOT NULL,
                    delivered_at timestamptz, PRIMARY KEY (post_id, channel))`);

/** The cron job: generate today's post once, from whichever capable replica gets there first. */
function generateDailyPost(replica: Replica, day: string) {
  return singleRun(tm, { name: 'daily-post', key: day }, async (tx) => {
    if (!replica.publishToken) return err(new CannotPublish(`${replica.name} has no publish token`));
    const body = `Post of ${day}, written by ${replica.name}`; // the LLM calls would go here (or before)
    const { rows } = await tx.query<{ id: number }>(
      'INSERT INTO blog_posts (day, body) VALUES ($1, $2) RETURNING id',
      [day, body],
    );
    const postId = rows[0]!.id;
    // Row locks on new rows only: the outbox of the publications, committed with the post.
    await tx.query(
      "INSERT INTO deliveries (post_id, channel) SELECT $1, c FROM unnest(ARRAY['telegram-ru', 'telegram-en', 'vk']) c",
      [postId],
    );
    return ok({ postId, by: replica.name });
  });
}

/** Delivers pending publications, one row per short transaction; safe on every replica at once. */
async function deliverPending(replica: Replica): Promise<number> {
  if (!replica.publishToken) return 0;
  let delivered = 0;
  for (let i = 0; i < 100; i++) {
    const outcome = await tm.do(async (tx) => {
      // FOR UPDATE SKIP LOCKED: a row lock on one pending delivery; rows other replicas are delivering
      // right now are skipped, and the lock goes with COMMIT/ROLLBACK or with a dead connection.
      const { rows } = await tx.query<{ post_id: number; channel: string }>(
        `SELECT post_id, channel FROM deliveries WHERE delivered_at IS NULL
          ORDER BY post_id, channel LIMIT 1 FOR UPDATE SKIP LOCKED`,
      );
      const row = rows[0];
      if (!row) return 'empty' as const;
      // A stand-in for the Telegram/VK call (short, with its own timeout in real code).
      console.log(`  ${replica.name} publishes post ${row.post_id} to ${row.channel}`);
      // Row lock already held (FOR UPDATE above): marks it delivered in the same short transaction.
      await tx.query('UPDATE deliveries SET delivered_at = now() WHERE post_id = $1 AND channel = $2', [
        row.post_id,
        row.channel,
      ]);
      return 'delivered' as const;
    });
    if (outcome.isErr() || outcome.value === 'empty') break;
    delivered++;
  }
  return delivered;
}

const replicas: Replica[] = [
  { name: 'laptop (no token)', publishToken: undefined },
  { name: 'prod-old', publishToken: 'token' },
  { name: 'prod-new', publishToken: 'token' },
];
const day = new Date().toISOString().slice(0, 10);
for (let tick = 1; tick <= 2; tick++) {
  console.log(`cron tick ${tick}:`);
  const results = await Promise.all(replicas.map((r) => generateDailyPost(r, day)));
  results.forEach((result, i) => {
    const who = replicas[i]!.name;
    if (result.isOk()) console.log(`  ${who}: generated post ${result.value.postId}`);
    else if (result.error.kind === 'AlreadyDone') console.log(`  ${who}: already done`, result.error.result);
    else console.log(`  ${who}: ${result.error.kind} (${result.error.message})`);
  });
  await Promise.all(replicas.map(deliverPending));
}
const { rows } = await pool.query('SELECT count(*)::int AS posts FROM blog_posts WHERE day = $1', [day]);
const pending = await pool.query('SELECT count(*)::int AS n FROM deliveries WHERE delivered_at IS NULL');
console.log(`posts for ${day}: ${rows[0].posts}; undelivered publications: ${pending.rows[0].n}`);

await pool.end();
await server?.stop();
