// The daily-post service of examples/daily-post.ts (run that one: `npm run example -- daily-post`):
// its tasks, its schedule and one replica's worker. The story and the design are told there.
import type pg from 'pg';
import { z } from 'zod';
import { migrateSingleRun, singleRun } from '../../src/advisory/index.js';
import { Queue, type QueueWorker, type ScheduleDefinition, scheduledTick } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';

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
  const singleRunTable = await migrateSingleRun(pool);
  if (singleRunTable.isErr()) throw singleRunTable.error;
  const queue = new Queue({ pool, txManager: new TxManager(pool), schema, tasks: dailyPostTasks });
  const migrated = await queue.migrate();
  if (migrated.isErr()) throw migrated.error;
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
