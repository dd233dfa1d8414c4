import type { ResultAsync } from 'neverthrow';
import type { z } from 'zod/v4';
import type { DatabaseFailure, InvalidOptions, LeaseLost } from '../../errors/errors.js';
import type { Logger } from '../../observability/logger.js';
import type { QueueTelemetry } from '../../observability/queue-telemetry.js';
import type { PoolCounters } from '../../tx/acquire-client.js';
import type { Db, Tx } from '../../tx/types.js';
import type { ClaimedLease, Job, JobLease, JobState } from '../job.js';
import type { PayloadSchema } from '../payload-schema.js';
import type { pruneOptionsSchema } from '../queue-options.js';
import type { SchedulePassResult } from '../schedules/schedule-pass.js';
import type { QueueMetrics } from './queue-health.js';
import type { InvalidLease } from './split-leases.js';

/** Options of a prune (`queue.prune`). */
export type PruneInput = z.input<typeof pruneOptionsSchema>;

/** Task name → schema of its payload (zod from the user's copy, or any Standard Schema). */
export type TaskMap = Readonly<Record<string, PayloadSchema>>;

/**
 * The part of `TxManager` the queue uses: `do(fn)` runs `fn` in one transaction and returns its
 * `Result` (an `Err` returned by `fn` rolls back and comes back as the `Err`).
 */
export interface QueueTxManager {
  /** Runs `fn` in one transaction (`TxManager.do`). */
  do<R>(fn: (tx: Tx) => R): ResultAsync<unknown, unknown>;
}

/** One failure to write in a batch (`failMany`). */
export interface FailItem {
  /** The job and the lease it was claimed under (the failure is fenced by it). */
  readonly job: JobLease;
  /** The error message stored with the job. */
  readonly error: string;
  /** Retry after this many ms instead of the backoff. */
  readonly retryInMs?: number | undefined;
  /** True: dead now, whatever attempts are left. */
  readonly final?: boolean | undefined;
}

/** The outcome of a written failure. */
export interface FailResult {
  /** 'pending' (will be retried at runAt) or 'dead' (attempts used up or final). */
  readonly state: Exclude<JobState, 'running'>;
  /** When it runs again (meaningful when pending). */
  readonly runAt: Date;
}

/** The outcome of a batch completion (`completeMany`). */
export interface CompleteManyResult {
  /** Ids completed. */
  readonly completed: string[];
  /** Ids whose lease was lost (someone else owns the job now; nothing changed). */
  readonly lost: string[];
  /** Items with a malformed id or lease token, each with its error (sent nowhere). */
  readonly invalid: InvalidLease[];
}

/** The outcome of a batch completion that took over its groups' next jobs (`completeAndTakeNext`). */
export interface CompleteAndTakeNextResult extends CompleteManyResult {
  /** The jobs taken over, each leased to the caller as a claim leases it: run them like claimed jobs. */
  readonly next: Job[];
}

/** What one claim statement returned (`JobStore.claimBatch`). */
export interface ClaimedBatch {
  /** The jobs claimed, each with a fresh lease. */
  readonly jobs: Job[];
  /**
   * Set when a rate limit held jobs back: ms until the earliest full rate window frees a place (a
   * worker sleeps that long, at most its poll interval, instead of claiming again at once).
   */
  readonly waitMs: number | undefined;
}

/** The outcome of a reaper pass (`reap`). */
export interface ReapResult {
  /** Jobs whose lease had expired that went back to pending. */
  readonly requeued: number;
  /** Jobs whose lease had expired on their last attempt, now dead. */
  readonly dead: number;
}

/** Claims jobs: what a worker's job supply takes. */
export interface ClaimStore {
  /** Claims up to `batch` runnable jobs of `tasks` in one statement, each with a fresh lease (and the rate limits' wait hint). */
  claimBatch(options: {
    batch: number;
    lease: number;
    tasks: string[];
  }): ResultAsync<ClaimedBatch, InvalidOptions | DatabaseFailure>;
}

/** Settles jobs: what the settle batcher and a handler's transaction take. */
export interface SettleStore {
  /** As completeMany, for jobs this store's own claim returned (their leases are not checked again). */
  completeClaimed(jobs: readonly ClaimedLease[]): ResultAsync<CompleteManyResult, DatabaseFailure>;
  /**
   * As completeClaimed, and takes over the group slots it frees: the groups' next ready jobs of `tasks`,
   * leased for `lease` ms, at most `max` (none when the queue's limits are not concurrency only).
   */
  completeAndTakeNext(
    jobs: readonly ClaimedLease[],
    options: { lease: number; tasks: string[]; max: number },
  ): ResultAsync<CompleteAndTakeNextResult, InvalidOptions | DatabaseFailure>;
  /** Records many failed attempts in one fenced statement. */
  failMany(items: readonly FailItem[]): ResultAsync<Map<string, FailResult>, DatabaseFailure>;
  /** The fenced completion of `job` on `db` (a transaction); driver errors propagate. */
  completeWithin(db: Db, job: JobLease): Promise<boolean>;
}

/** Holds and gives back leases: the heartbeat and a stopping worker. */
export interface LeaseStore {
  /** Extends many leases in one fenced statement (heartbeat). */
  extendMany(
    jobs: readonly JobLease[],
    lease: number,
  ): ResultAsync<Map<string, Date>, InvalidOptions | DatabaseFailure>;
  /** Gives running jobs back without charging the attempt. */
  release(jobs: readonly JobLease[]): ResultAsync<string[], DatabaseFailure>;
}

/** Returns expired leases: the reaper. */
export interface ReapStore {
  /** Returns expired leases to pending (or dead). */
  reap(): ResultAsync<ReapResult, InvalidOptions | DatabaseFailure>;
}

/** Stores a running job's progress: a handler's `ctx.progress`. */
export interface ProgressStore {
  /** Stores a running job's progress (JSON text from `progressJson`), fenced by the lease token. */
  writeProgress(job: JobLease, json: string): ResultAsync<void, LeaseLost | InvalidOptions | DatabaseFailure>;
}

/** What a worker reads from its queue: where to LISTEN, its defaults and limits, logger and telemetry. */
export interface QueueSettings {
  /** The queue's `logger` option (the workers' log lines), if given. */
  readonly logger: Logger | undefined;
  /** Spans and counters of enqueues and job runs (no-op without OpenTelemetry). */
  readonly telemetry: QueueTelemetry;
  /** The NOTIFY channel workers LISTEN on. */
  readonly channel: string;
  /** The NOTIFY channel carrying cancelled running jobs' ids. */
  readonly cancelChannel: string;
  /** Default lease of a claim, in ms. */
  readonly leaseMs: number;
  /**
   * Whether claims are limited (the queue declares groups or task rates): a claim can come back short
   * while ready jobs remain, because every job it could take belongs to a full group.
   */
  readonly limited: boolean;
  /**
   * Whether completions take over the group slots they free (`completeAndTakeNext`): limits declared,
   * all of them concurrency (a rate counts claims, and a take-over would not log one).
   */
  readonly takesOver: boolean;
  /**
   * Whether the queue declares a rate limit (a group's `rate` or a `taskRates` entry): its workers claim
   * only for free handler slots (no local queue), so a claimed job starts at once and handler starts
   * follow the rate the claims keep.
   */
  readonly rated: boolean;
  /**
   * Where the queue's statements go; the LISTEN session is a connection of its own built from `options`.
   * Its counters tell a handler's `ctx.progress` whether a client is free while `ctx.transaction` holds one.
   */
  readonly pool: PoolCounters;
  /** Runs a handler's transaction together with its job's fenced completion. */
  readonly txManager: QueueTxManager;
  /** Task → capabilities a worker needs to claim it. */
  readonly requires: Readonly<Record<string, readonly string[]>>;
  /** The payload schema of a task: a job enqueued from SQL is validated by it before its handler runs. */
  schemaOf(task: string): PayloadSchema | undefined;
}

/** The queue's upkeep that workers run on timers: health gauges, retention, the scheduler. */
export interface QueueUpkeep {
  /** The queue's health (bounded-cost counts, oldest ready age, table statistics). */
  metrics(): ResultAsync<QueueMetrics, InvalidOptions | DatabaseFailure>;
  /** Deletes archived (and dead) jobs older than the retention, in bounded batches. */
  prune(options: PruneInput): ResultAsync<unknown, InvalidOptions | DatabaseFailure>;
  /** The schedules this process declares. */
  readonly declaredSchedules: readonly unknown[];
  /** One scheduler pass. */
  fireSchedules(options: {
    declare: boolean;
    liveness: number;
  }): ResultAsync<SchedulePassResult, InvalidOptions | DatabaseFailure>;
}

/**
 * What `new QueueWorker(store, …)` is given (the public `Queue` is one): the narrow stores and the
 * queue's settings and upkeep. The worker hands each of its parts only the store it needs — the job
 * supply a {@link ClaimStore}, the settle batcher a {@link SettleStore}, the handler runner a
 * {@link SettleStore}, {@link LeaseStore} and {@link ProgressStore}, the reaper a {@link ReapStore} — as
 * River's completer takes an executor, so the path of a job reads top-down (enqueue → claim → handler →
 * settle) without an import back to the queue.
 *
 * @example
 * const store: JobStore = queue;
 * const batch = await store.claimBatch({ batch: 10, lease: 30_000, tasks: ['email'] });
 */
export interface JobStore
  extends ClaimStore,
    SettleStore,
    LeaseStore,
    ReapStore,
    ProgressStore,
    QueueSettings,
    QueueUpkeep {}
