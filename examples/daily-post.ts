// The daily post, rebuilt on the queue: generated once per day however many replicas run, published by
// any replica that holds the publishing token, and every publication that failed is retried by whichever
// capable replica is up.
//
//   npm run example -- daily-post            (an embedded PostgreSQL is started and removed)
//   DATABASE_URL=postgres://… npm run example -- daily-post
//
// The story it comes from: a blog generator whose cron ran every six hours on every replica; replicas
// coordinated with a session advisory lock keyed by the day. Four incidents in ten days: a replica saw
// the lock held and skipped the retry of failed publications (the holder had died); lock and unlock went
// through different pooled connections, so the lock stayed held; the serverless provider cut an idle
// connection while it held the lock, leaving it orphaned for hours; and a developer's laptop, pointed at
// the production database without the publishing token, won the day's lock, wrote the post and could
// not publish it — a day of silence in the channels. Here:
// - a schedule stored in the database (`schedules` on the Queue) fires each tick exactly once across
//   replicas: its job is enqueued in the transaction that moves the persisted next run forward, under
//   the schedule row's lock. If the replica that fired the last tick stops, any other fires the next;
// - the day's post is written once: `singleRun(name 'daily-post', key = the local date)` inside the
//   job's own transaction (the post, its run record, one publish job per channel and the job's
//   completion commit together). Ticks every six hours, one post per day: later ticks find it done;
// - publishing is one job per channel, `requires: ['publish-token']`: a worker that did not declare that
//   capability (the laptop) never claims one. A publication that fails is retried with backoff by any
//   capable replica; a replica killed mid-publish loses its lease and another one takes the job over;
// - no connection is held across the slow external calls (the writer, the channels), and no session
//   lock exists to leak.
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { z } from 'zod';
import { migrateSingleRun, singleRun } from '../src/patterns/advisory/index.js';
import {
  Queue,
  type QueueWorker,
  type ScheduleDefinition,
  scheduledTick,
} from '../src/patterns/queue/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';
import { TxManager } from '../src/tx/tx-manager.js';

/** The channels every post goes to. */
export const CHANNELS = ['telegram-ru', 'telegram-en', 'vk'] as const;
/** A channel name. */
export type Channel = (typeof CHANNELS)[number];

/** The queue's tasks: one job per tick generates the day's post; one job per channel publishes it. */
export const dailyPostTasks = {
  'generate-post': z.object({ edition: z.string().default('v1') }),
  publish: z.object({ postId: z.number().int(), channel: z.enum(CHANNELS) }),
};

/** Production's schedule: every six hours, Paris time; a tick missed while nothing ran fires once on start. */
export const DAILY_POST_SCHEDULE: ScheduleDefinition<'generate-post'> = {
  cron: '0 */6 * * *',
  tz: 'Europe/Paris',
  task: 'generate-post',
  missed: 'once',
};

/** The day a tick belongs to: its local date in Paris ('2026-03-29'). */
export function parisDay(tick: Date): string {
  return new Intl.DateTimeFormat('en-CA', { timeZone: 'Europe/Paris' }).format(tick);
}

/** The slow external calls (an LLM writing the post; a channel's API). */
export interface DailyPostServices {
  write(day: string, signal: AbortSignal): Promise<string>;
  publish(
    channel: Channel,
    post: { id: number; day: string; body: string },
    signal: AbortSignal,
  ): Promise<void>;
}

/** How one replica is configured (its environment). */
export interface DailyPostReplicaOptions {
  readonly pool: pg.Pool;
  readonly services: DailyPostServices;
  /** Whether this process holds the publishing token (a laptop does not). */
  readonly canPublish: boolean;
  /** The schedule this version declares (default: {@link DAILY_POST_SCHEDULE}). */
  readonly schedule?: ScheduleDefinition<'generate-post'>;
  /** Which day a tick belongs to (default: {@link parisDay}). */
  readonly dayOf?: (tick: Date) => string;
  /** Queue schema (default 'daily_post_queue'). */
  readonly schema?: string;
  /** The queue's lease (default 30 s): a replica killed mid-publish has its job taken over after it. */
  readonly lease?: number | string;
  /** Worker options passed through (intervals, hooks). */
  readonly work?: Parameters<Queue['work']>[1];
}

/** Creates the tables, the single-run record table and the queue schema (safe from every replica at once). */
export async function migrateDailyPost(pool: pg.Pool, schema = 'daily_post_queue'): Promise<void> {
  (await migrateSingleRun(pool))._unsafeUnwrap();
  const queue = new Queue({ pool, txManager: new TxManager(pool), schema, tasks: dailyPostTasks });
  (await queue.migrate())._unsafeUnwrap();
  // CREATE … IF NOT EXISTS takes no lock on existing tables; a first concurrent creation is serialized by
  // the catalog (run it once at deploy, as here).
  await pool.query(`
    CREATE TABLE IF NOT EXISTS blog_posts (id serial PRIMARY KEY, day text NOT NULL, edition text NOT NULL,
      body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
    CREATE TABLE IF NOT EXISTS publications (post_id int NOT NULL REFERENCES blog_posts, channel text NOT NULL,
      published_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (post_id, channel))`);
}

/** One running replica: its queue and worker. */
export interface DailyPostReplica {
  readonly queue: Queue<typeof dailyPostTasks>;
  readonly worker: QueueWorker<typeof dailyPostTasks>;
}

/** Starts one replica of the service: declares the schedule and runs the worker (scheduler included). */
export function startDailyPostReplica(o: DailyPostReplicaOptions): DailyPostReplica {
  const tm = new TxManager(o.pool);
  const dayOf = o.dayOf ?? parisDay;
  const queue = new Queue({
    pool: o.pool,
    txManager: tm,
    schema: o.schema ?? 'daily_post_queue',
    tasks: dailyPostTasks,
    schedules: { 'daily-post': o.schedule ?? DAILY_POST_SCHEDULE },
    requires: { publish: ['publish-token'] },
    lease: o.lease ?? 30_000,
  });
  const worker = queue.work(
    {
      'generate-post': async (job, ctx) => {
        const day = dayOf(scheduledTick(job) ?? job.createdAt);
        // The slow part first, outside any transaction and holding no connection.
        const body = await o.services.write(day, ctx.signal);
        const written = await ctx.transaction(async () => {
          // Joins the job's transaction: post, run record, publish jobs and the job's completion commit
          // together. AlreadyDone: an earlier tick wrote today's post. LockBusy: another run of the same
          // day is writing it right now (if it fails, its own job is retried).
          const once = await singleRun(tm, { name: 'daily-post', key: day }, async (tx) => {
            // Row locks on the new rows only.
            const { rows } = await tx.query<{ id: number }>(
              'INSERT INTO blog_posts (day, edition, body) VALUES ($1, $2, $3) RETURNING id',
              [day, job.payload.edition, body],
            );
            const postId = rows[0]?.id ?? 0;
            for (const channel of CHANNELS) {
              const queued = await queue.enqueue(
                tx,
                'publish',
                { postId, channel },
                { key: `${postId}:${channel}` },
              );
              if (queued.isErr()) throw queued.error;
            }
            return { postId };
          });
          if (once.isErr() && once.error.kind !== 'AlreadyDone' && once.error.kind !== 'LockBusy')
            throw once.error;
          return once.isOk() ? once.value.postId : undefined;
        });
        if (written.isErr()) throw written.error;
      },
      publish: async (job, ctx) => {
        const { postId, channel } = job.payload;
        // A plain read: the post is immutable once written.
        const { rows } = await o.pool.query<{ id: number; day: string; body: string }>(
          'SELECT id, day, body FROM blog_posts WHERE id = $1',
          [postId],
        );
        const post = rows[0];
        if (post === undefined) throw new Error(`post ${postId} not found`);
        // The external call: at least once (a process killed right after it publishes again on retry).
        await o.services.publish(channel, post, ctx.signal);
        // The record: exactly once, committed with the job's completion.
        const recorded = await ctx.transaction((tx) =>
          tx.query('INSERT INTO publications (post_id, channel) VALUES ($1, $2)', [postId, channel]),
        );
        if (recorded.isErr()) throw recorded.error;
      },
    },
    { capabilities: o.canPublish ? ['publish-token'] : [], ...o.work },
  );
  return { queue, worker };
}

/** The demo: three replicas (two deployed versions overlapping, and a laptop without the token). */
async function main(): Promise<void> {
  const server = process.env.DATABASE_URL ? undefined : await startPostgres();
  const url = process.env.DATABASE_URL ?? server?.url;
  const pools = ['prod-old', 'prod-new', 'laptop'].map(
    (name) => new pg.Pool({ connectionString: url, max: 4, application_name: name }),
  );
  const [oldPool, newPool, laptopPool] = pools as [pg.Pool, pg.Pool, pg.Pool];
  await migrateDailyPost(oldPool);
  let flaky = 2; // the first two channel calls fail (a 504 from the channel): retried by any capable replica
  const services = (who: string): DailyPostServices => ({
    write: async (day) => `Post of ${day}, written on ${who}`,
    publish: async (channel, post) => {
      if (flaky-- > 0) throw new Error(`${channel}: 504 Gateway Timeout`);
      console.log(`  ${who} published post ${post.id} (${post.day}) to ${channel}`);
    },
  });
  // Compressed time for the demo: a tick every second, a "day" of three ticks.
  const fast = { every: '1s', task: 'generate-post', grace: '1m' } as const;
  const dayOf = (tick: Date) => `day ${Math.floor(tick.getTime() / 3000)}`;
  const work = { scheduleInterval: 100, reapInterval: 500 };
  const running = [
    startDailyPostReplica({
      pool: oldPool,
      services: services('prod-old'),
      canPublish: true,
      schedule: { ...fast, payload: { edition: 'v1' } },
      dayOf,
      work,
    }),
    startDailyPostReplica({
      pool: newPool,
      services: services('prod-new'),
      canPublish: true,
      schedule: { ...fast, payload: { edition: 'v2' } },
      dayOf,
      work,
    }),
    startDailyPostReplica({
      pool: laptopPool,
      services: services('laptop'),
      canPublish: false,
      schedule: { ...fast, payload: { edition: 'v1' } },
      dayOf,
      work,
    }),
  ];
  console.log('laptop skips:', running[2]?.worker.skippedTasks);
  await new Promise((resolve) => setTimeout(resolve, 7000));
  await Promise.all(running.map((r) => r.worker.stop()));
  const posts = await oldPool.query(
    'SELECT day, count(*)::int AS posts, min(edition) AS edition FROM blog_posts GROUP BY day ORDER BY day',
  );
  const published = await oldPool.query('SELECT count(*)::int AS n FROM publications');
  console.table(posts.rows);
  console.log(`publications: ${published.rows[0].n} (3 per post)`);
  await Promise.all(pools.map((p) => p.end()));
  await server?.stop();
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
