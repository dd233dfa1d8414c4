import type { z } from 'zod/v4';
import type { DatabaseFailure, InvalidOptions, LeaseLost, NotFound, UnknownTask } from '../errors/errors.js';
import type { JobState } from './job.js';
import type {
  claimOptionsSchema,
  enqueueManyOptionsSchema,
  enqueueOptionsSchema,
  failOptionsSchema,
  metricsOptionsSchema,
  pruneOptionsSchema,
  queueOptionsSchema,
  rateSchema,
  reapOptionsSchema,
  redriveOptionsSchema,
} from './queue-options.js';
import type { ScheduleDefinition } from './schedules/schedule-options.js';
import type { QueueTxManager, TaskMap } from './store/job-store.js';

// The public Queue's option and result types, in a file of their own: the options come from their zod
// schemas (queue-options.ts), and nothing here imports the Queue, so no file that needs a type has to
// import queue.ts.

/** Options of {@link Queue} (see `queueOptionsSchema` for every field). */
export type QueueOptions<T extends TaskMap> = Omit<
  z.input<typeof queueOptionsSchema>,
  'tasks' | 'txManager' | 'schedules' | 'requires'
> & {
  readonly tasks: T;
  readonly txManager: QueueTxManager;
  /**
   * Recurring schedules, each tick enqueued exactly once across replicas (see docs/queue.md, Schedules).
   *
   * @example
   * schedules: { 'daily-post': { cron: '0 6 * * *', tz: 'Europe/Paris', task: 'generate-post', missed: 'once' } }
   */
  readonly schedules?: { readonly [name: string]: ScheduleDefinition<keyof T & string> };
  /**
   * Task → capabilities a worker must declare (`work(…, { capabilities })`) to claim it.
   *
   * @example
   * requires: { publish: ['publish-token'] }
   */
  readonly requires?: { readonly [K in keyof T]?: readonly string[] };
};
/**
 * The `groups` option of {@link Queue}: group key → its limits; `default` applies to every group not
 * named.
 *
 * @example
 * const groups: GroupsOption = { default: { concurrency: 1 }, 'customer-big': { concurrency: 4, rate: { limit: 100, per: '1m' } } };
 */
export type GroupsOption = NonNullable<z.input<typeof queueOptionsSchema>['groups']>;
/** The limits of one group (see {@link GroupsOption}). */
export type GroupLimits = GroupsOption[string];
/**
 * A rate limit: at most `limit` claims in any interval of `per + guard` (guard: 100 ms unless given), so
 * at most `limit` handler starts in any interval of `per` while the starts' delays after their claims
 * differ by less than the guard.
 *
 * @example
 * const rate: RateLimit = { limit: 10, per: '1s' }; // at most 10 starts in any second, 10 per 1.1 s when saturated
 * const fine: RateLimit = { limit: 4, per: '250ms', guard: '20ms' };
 */
export type RateLimit = z.input<typeof rateSchema>;
/** Options of {@link Queue.enqueue}. */
export type EnqueueOptions = z.input<typeof enqueueOptionsSchema>;
/** Options of {@link Queue.enqueueMany}. */
export type EnqueueManyOptions = z.input<typeof enqueueManyOptionsSchema>;
/** Options of {@link Queue.claim}. */
export type ClaimOptions = z.input<typeof claimOptionsSchema>;
/** Options of {@link Queue.fail}. */
export type FailOptions = z.input<typeof failOptionsSchema>;
/** Options of {@link Queue.redrive}. */
export type RedriveOptions = z.input<typeof redriveOptionsSchema>;
/** Options of {@link Queue.metrics}. */
export type MetricsOptions = z.input<typeof metricsOptionsSchema>;
/** Options of {@link Queue.reap}. */
export type ReapOptions = z.input<typeof reapOptionsSchema>;
/** Options of {@link Queue.prune}. */
export type PruneOptions = z.input<typeof pruneOptionsSchema>;

/** What {@link Queue.cancel} did. */
export interface CancelResult {
  /** The job id. */
  readonly id: string;
  /**
   * The state the job was in: 'pending' (it will never run), 'running' (its handler's `ctx.signal`
   * aborts with `JobCancelled` and its settle writes nothing) or 'dead' (it will not be redriven).
   */
  readonly state: JobState;
}

/** A job as {@link Queue.job} reads it: live (pending, running, dead) or archived (done, cancelled). */
export interface JobInfo {
  /** Job id. */
  readonly id: string;
  /** Task name. */
  readonly task: string;
  /** Where it is: live states, or 'done' / 'cancelled' for an archived job. */
  readonly state: JobState | 'done' | 'cancelled';
  /** The payload. */
  readonly payload: unknown;
  /** Attempts so far. */
  readonly attempts: number;
  /** Unique key, if any. */
  readonly key: string | null;
  /** The error of the last failed attempt, if any. */
  readonly lastError: string | null;
  /** The last progress stored by its handler (`ctx.progress`), null when none. */
  readonly progress: unknown;
  /** When it was enqueued. */
  readonly createdAt: Date;
  /** When it (next) runs; null for an archived job. */
  readonly runAt: Date | null;
  /** Its attempt limit; null for an archived job. */
  readonly maxAttempts: number | null;
  /** When its lease expires (running jobs only), else null. */
  readonly leaseExpiresAt: Date | null;
  /** When it was archived (done or cancelled), else null. */
  readonly finishedAt: Date | null;
}

/** What {@link Queue.prune} deleted. */
export interface PruneResult {
  /** Archived jobs deleted. */
  readonly archived: number;
  /** Dead jobs deleted. */
  readonly dead: number;
}

/** What enqueue can fail with. */
export type EnqueueError = UnknownTask | InvalidOptions | NotFound | DatabaseFailure;
/** What a settle (complete, fail, extend) can fail with. */
export type SettleError = LeaseLost | InvalidOptions | DatabaseFailure;

/** Result of {@link Queue.enqueueMany}. */
export interface EnqueueManyResult {
  /** Ids of the jobs inserted, in payload order. */
  readonly ids: readonly string[];
  /** Payloads skipped because a live job already had their key. */
  readonly skipped: number;
}

/** What {@link Queue.stats} reports. */
export interface QueueStats {
  /** Pending jobs (including those scheduled in the future). */
  readonly pending: number;
  /** Pending jobs that could run now. */
  readonly ready: number;
  /** Running (leased) jobs. */
  readonly running: number;
  /** Running jobs whose lease has expired (the reaper's work; 0 in a healthy queue). */
  readonly expired: number;
  /** Dead jobs (attempts used up), waiting for redrive or cancel. */
  readonly dead: number;
  /** Age in ms of the oldest job that could run now (0 when none): the queue's lag. */
  readonly oldestReadyMs: number;
  /** Dead tuples of the jobs table (pg_stat_user_tables, approximate): vacuum backlog. */
  readonly deadTuples: number;
  /** Live tuples of the jobs table (approximate). */
  readonly liveTuples: number;
}
