import type { ResultAsync } from 'neverthrow';
import type { DatabaseFailure, LeaseLost } from '../../errors/errors.js';
import type { Db, Tx } from '../../tx/types.js';
import type { ClaimedLease, Job, JobLease, JobState } from '../job.js';
import type { PayloadSchema } from '../payload-schema.js';
import type { InvalidLease } from './split-leases.js';

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

/** What one claim statement returned ({@link ClaimStore.claimBatch}). */
export interface ClaimedBatch {
  /** The jobs claimed, each with a fresh lease. */
  readonly jobs: Job[];
  /**
   * Set when a rate limit held jobs back: ms until the earliest full rate window frees a place (a
   * worker sleeps that long, at most its poll interval, instead of claiming again at once).
   */
  readonly waitMs: number | undefined;
}

/**
 * How a reaper pass works through expired leases: `batch` rows a statement (SKIP LOCKED), at most
 * `maxBatches` statements. The defaults of `queue.reap()` and of a worker's reaper.
 */
export const REAP_BATCHES = { batch: 500, maxBatches: 20 } as const;

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
    readonly batch: number;
    readonly lease: number;
    readonly tasks: readonly string[];
  }): ResultAsync<ClaimedBatch, DatabaseFailure>;
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
    options: { readonly lease: number; readonly tasks: readonly string[]; readonly max: number },
  ): ResultAsync<CompleteAndTakeNextResult, DatabaseFailure>;
  /** Records many failed attempts in one fenced statement. */
  failMany(items: readonly FailItem[]): ResultAsync<Map<string, FailResult>, DatabaseFailure>;
  /** The fenced completion of `job` on `db` (a transaction); driver errors propagate. */
  completeWithin(db: Db, job: JobLease): Promise<boolean>;
}

/** Holds and gives back leases: the heartbeat and a stopping worker. */
export interface LeaseStore {
  /** Extends many leases in one fenced statement (heartbeat). */
  extendMany(jobs: readonly JobLease[], lease: number): ResultAsync<Map<string, Date>, DatabaseFailure>;
  /** Gives running jobs back without charging the attempt. */
  release(jobs: readonly JobLease[]): ResultAsync<string[], DatabaseFailure>;
}

/** Returns expired leases: the reaper. */
export interface ReapStore {
  /** Returns expired leases to pending (or dead), in the default batches ({@link REAP_BATCHES}). */
  reap(): ResultAsync<ReapResult, DatabaseFailure>;
}

/** Stores a running job's progress: a handler's `ctx.progress`. */
export interface ProgressStore {
  /** Stores a running job's progress (JSON text from `progressJson`), fenced by the lease token. */
  writeProgress(job: JobLease, json: string): ResultAsync<void, LeaseLost | DatabaseFailure>;
}
