import type { ResultAsync } from 'neverthrow';
import { z } from 'zod/v4';
import type { DatabaseFailure, InvalidOptions, LeaseLost, TxKitError } from '../../errors/errors.js';
import type { Tx } from '../../tx/types.js';
import type { Job } from '../job.js';
import type { PayloadOutput } from '../payload-schema.js';
import {
  capabilityName,
  durationSchema,
  leaseSchema,
  livenessSchema,
  pruneFieldsSchema,
  SOME_RETENTION,
} from '../queue-options.js';
import type { ScheduleFiring } from '../schedules/schedule-pass.js';
import type { TaskMap } from '../store/job-store.js';

/** What a handler gets besides its job. */
export interface JobContext {
  /**
   * Aborted when the handler times out (`handlerTimeout`: the run still ends only when the handler
   * returns, its job leased until then), when the worker is forced to stop, when the
   * job is cancelled (`queue.cancel`: reason `JobCancelled`, heard on the worker's LISTEN session), or
   * when the heartbeat finds the lease lost (reason `LeaseLost`; also how a cancel reaches a worker
   * without LISTEN). Pass it to fetch/HTTP clients.
   */
  readonly signal: AbortSignal;
  /**
   * Stores `value` (JSON, at most 8 KiB) as the job's progress, readable with `queue.job(id)` and kept
   * across retries (the next attempt gets it as `job.progress`). Coalesced: the last value wins, written
   * at once, then at most once per `progressInterval`, and once more when the handler returns, so
   * calling it in a tight loop costs no more statements than that. Resolves when the value (or a newer
   * one) is written; `InvalidOptions` at once and nothing sent for a value that is not JSON or too
   * large; `LeaseLost` and nothing written when the job is no longer ours. No need to await it. (It
   * runs on the pool, outside `ctx.transaction`: awaiting it inside that callback on a pool of one
   * connection would wait forever.)
   *
   * @example
   * for (const [i, row] of rows.entries()) {
   *   await importRow(row);
   *   void ctx.progress({ done: i + 1, total: rows.length });
   * }
   */
  progress(value: unknown): ResultAsync<void, LeaseLost | InvalidOptions | DatabaseFailure>;
  /**
   * Runs `fn(tx)` in ONE transaction together with this job's fenced completion: the handler's
   * database writes commit if and only if the job is completed, so they happen exactly once even if
   * the job is run again. If the lease was lost, the transaction rolls back and `LeaseLost` comes
   * back; past `handlerTimeout` too (its `cause` the `HandlerTimeout`; begun after the timeout, nothing
   * is sent). Call it at most once per run; when it returns an `Err`, the job is failed.
   * External side effects (HTTP, e-mail) are at-least-once: make them idempotent.
   *
   * @example
   * const r = await ctx.transaction((tx) => tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [job.payload.orderId]));
   * if (r.isErr()) throw r.error;
   */
  transaction<R>(fn: (tx: Tx) => Promise<R> | R): ResultAsync<R, LeaseLost | TxKitError>;
}

/** A task handler: resolve to complete the job, throw (or reject) to fail it. */
export type JobHandler<P> = (job: Job<P>, context: JobContext) => unknown;

/** Task name → handler. The worker only claims tasks it has a handler for. */
export type WorkHandlers<T extends TaskMap> = { readonly [K in keyof T]?: JobHandler<PayloadOutput<T[K]>> };

/** How a job's run ended. */
export type JobOutcome = 'completed' | 'failed' | 'dead' | 'lost' | 'cancelled' | 'released' | 'unsettled';

/** Reported by {@link WorkerHooks.onJobEnd}. */
export interface JobEndEvent {
  /** The job that ended. */
  readonly job: Job;
  /**
   * completed; failed (will retry); dead (attempts used up); lost (lease lost: someone else owns the
   * job now, or it was cancelled and the heartbeat found out; nothing written); cancelled (the job was
   * cancelled while it ran and the worker heard it; nothing written); released (given back on a forced stop); unsettled (the settle could
   * not be written — the lease will expire and the reaper re-queues it).
   */
  readonly outcome: JobOutcome;
  /** The handler's error (failed/dead) or the settle's error (lost/unsettled). */
  readonly error?: unknown;
  /**
   * Handler run time in ms, until it returned (past `handlerTimeout` too: the run ends, and is reported,
   * when the handler returns).
   */
  readonly durationMs: number;
}

/** Where an error reported by {@link WorkerHooks.onError} happened. */
export type WorkerPhase =
  | 'claim'
  | 'settle'
  | 'heartbeat'
  | 'reap'
  | 'prune'
  | 'listen'
  | 'release'
  | 'hook'
  | 'schedule'
  | 'worker';

/** A task this worker has a handler for but does not claim: it lacks capabilities the task requires. */
export interface SkippedTask {
  /** The task's name. */
  readonly task: string;
  /** The capabilities the task requires (`requires`) that the worker did not declare (`capabilities`). */
  readonly missing: readonly string[];
}

/** Observability hooks. Errors thrown by hooks are caught (and reported to onError once). */
export interface WorkerHooks {
  /** An error outside handlers (database down, LISTEN lost …). The worker keeps going. */
  onError?(error: unknown, phase: WorkerPhase): void;
  /** A handler is about to run. */
  onJobStart?(job: Job): void;
  /** A job's run ended. */
  onJobEnd?(event: JobEndEvent): void;
  /** Once, at start: tasks this worker will not claim, and the capabilities each lacks. */
  onTasksSkipped?(skipped: readonly SkippedTask[]): void;
  /** This worker's scheduler enqueued a tick's job (or found a live job with its key: jobId null). */
  onScheduleFired?(firing: ScheduleFiring): void;
}

/** Options of `queue.work()` (validated; the type comes from this schema). */
export const workOptionsSchema = z.strictObject({
  /** Handlers running at once. */
  concurrency: z.number().int().min(1).max(1000).default(4),
  /** Most jobs claimed per statement (the worker claims min(batch, free slots + free local queue)). */
  batch: z.number().int().min(1).max(1000).default(500),
  /**
   * Jobs claimed ahead of free handler slots and held (leased, heartbeated) in a local queue, so one
   * claim statement feeds many short handlers. 'auto' (default): adapts to the backlog — `batch` after
   * a full claim (a backlog: few big claims), 0 after a short one (low load: claim only for the free
   * slots plus one job, so nothing is hoarded while another worker is idle; lowest latency). A number
   * fixes it.
   * Buffered jobs are released at once on stop. On a queue with a rate limit (a group's `rate`, or
   * `taskRates`) there is no local queue: claims ask for the free slots only, so a claimed job starts at
   * once and starts follow the rate.
   */
  prefetch: z.union([z.literal('auto'), z.number().int().min(0).max(10_000)]).default('auto'),
  /** Aborting it stops the worker gracefully (same as stop()). */
  signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal, 'an AbortSignal').optional(),
  /** Polling backstop: claim at least this often when idle (and the only wake-up without LISTEN). */
  pollInterval: durationSchema.default(1000),
  /** LISTEN for enqueue notifications on a dedicated pooled connection (false behind PgBouncer transaction pooling). */
  listen: z.boolean().default(true),
  /** Lease per claim (default: the queue's; at least 5 s); the worker extends it while a handler runs. */
  lease: leaseSchema.optional(),
  /**
   * After this long, abort the handler's `ctx.signal` (reason `HandlerTimeout`) and fail the attempt with
   * that error once the handler returns, whatever it returns or throws. Until it returns its job stays
   * leased (heartbeated) and its slot taken: a handler that ignores its signal is never run alongside the
   * job's next attempt. Its `ctx.transaction` after the timeout returns `LeaseLost` (cause
   * `HandlerTimeout`), rolled back; a completion it committed before the timeout stands.
   */
  handlerTimeout: durationSchema.optional(),
  /**
   * On stop, wait this long for running handlers, then abort them and wait as long again: a job goes back
   * to pending once its handler has returned; one whose handler still runs is left to its lease.
   */
  graceMs: durationSchema.default(10_000),
  /** Batch completions and failures into one statement each. */
  batchSettles: z.boolean().default(true),
  /**
   * How long settles are collected before they are written. 0 (default): adaptive — written at once,
   * and those arriving while a settle statement is in flight go together in the next one.
   */
  settleDelay: durationSchema.default(0),
  /** Write settles at once when this many are waiting. */
  maxSettleBatch: z.number().int().min(1).max(10_000).default(500),
  /** Run the reaper this often (0: never; another worker or a cron must). */
  reapInterval: durationSchema.default(5000),
  /**
   * Write a handler's `ctx.progress` at most this often (the first report goes at once, the last one
   * when the handler returns).
   */
  progressInterval: durationSchema.default(1000),
  /**
   * Retention: every `every` (default 10 minutes; first run one interval after start), run
   * `queue.prune` with these options: e.g. `{ olderThan: '7d', deadOlderThan: '30d' }`. Off unless given.
   * Safe on every replica at once (SKIP LOCKED batches).
   */
  retention: pruneFieldsSchema
    .extend({ every: durationSchema.refine((ms) => ms >= 1000, 'at least 1s').default(600_000) })
    .refine(...SOME_RETENTION)
    .optional(),
  /**
   * What this worker has, for tasks that declare `requires` on the queue: a task requiring a capability
   * not listed here is not claimed (reported by `skippedTasks` and `onTasksSkipped`).
   * E.g. `capabilities: process.env.PUBLISH_TOKEN ? ['publish-token'] : []`.
   */
  capabilities: z.array(capabilityName).max(1000).default([]),
  /**
   * Run the queue's scheduler in this worker (default true): fire due schedule ticks every
   * `scheduleInterval`, refresh this process's schedule declarations every `scheduleLiveness / 3`.
   * Every replica may run it: each tick is enqueued once. It does not depend on the capabilities. Only
   * when the queue declares schedules: a queue without any runs no scheduler.
   */
  schedules: z.boolean().default(true),
  /** How often the scheduler looks for due ticks (default 1 s). */
  scheduleInterval: durationSchema.pipe(z.number().min(10, 'at least 10 ms')).default(1000),
  /** A schedule declaration not refreshed for this long is no longer live (default 1 minute, at least 3 s). */
  scheduleLiveness: livenessSchema.default(60_000),
  /** Hooks for errors and job events. */
  hooks: z
    .custom<WorkerHooks>((v) => typeof v === 'object' && v !== null, 'an object of hook functions')
    .optional(),
});

/** Options of `queue.work()`. */
export type WorkOptionsInput = z.input<typeof workOptionsSchema>;
/** Options of `queue.work()` after defaults. */
export type WorkOptions = z.output<typeof workOptionsSchema>;

/** Counters of a worker's life so far. */
export interface WorkerCounters {
  /** Handlers started. */
  readonly started: number;
  /** Jobs completed. */
  readonly completed: number;
  /** Jobs failed and scheduled for a retry. */
  readonly failed: number;
  /** Jobs failed with their attempts used up (now `dead`). */
  readonly dead: number;
  /** Jobs whose lease was lost (someone else owns them now; nothing written). */
  readonly lost: number;
  /** Jobs cancelled while they ran (their `ctx.signal` aborted; nothing written). */
  readonly cancelled: number;
  /** Jobs given back unrun or unfinished on a forced stop. */
  readonly released: number;
  /** Jobs whose settle could not be written (the reaper re-queues them after their lease). */
  readonly unsettled: number;
  /** Errors reported to the hooks (claims, settles, the listener, the reaper). */
  readonly errors: number;
}
