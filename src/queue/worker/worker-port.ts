import type { ResultAsync } from 'neverthrow';
import type { z } from 'zod/v4';
import type { DatabaseFailure, InvalidOptions } from '../../errors/errors.js';
import type { Logger } from '../../observability/logger.js';
import type { QueueTelemetry } from '../../observability/queue-telemetry.js';
import type { PoolCounters } from '../../tx/acquire-client.js';
import type { PayloadSchema } from '../payload-schema.js';
import type { pruneOptionsSchema } from '../queue-options.js';
import type { SchedulePassResult } from '../schedules/schedule-pass.js';
import type {
  ClaimStore,
  LeaseStore,
  ProgressStore,
  QueueTxManager,
  ReapStore,
  SettleStore,
} from '../store/job-store.js';
import type { QueueMetrics } from '../store/queue-health.js';

// What a worker is given: the narrow stores it runs jobs through (store/job-store.ts) and what it reads
// from its queue and runs on timers. The worker's port belongs to the worker: the store knows nothing
// of schedules or retention.

/** Options of a prune (`queue.prune`). */
export type PruneInput = z.input<typeof pruneOptionsSchema>;

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
 * What `new QueueWorker(port, …)` is given: the queue's statements as the narrow stores, its settings
 * and its upkeep — never the public `Queue`. The worker hands each of its parts only the store it needs
 * — the job supply a {@link ClaimStore} (and `release`), the settle batcher a {@link SettleStore}, the
 * handler runner `completeWithin`, `extendMany` and a {@link ProgressStore}, the reaper a
 * {@link ReapStore} — as graphile-worker's worker gets `getJob`, `completeJob`, `failJob` and River's
 * completer a narrow executor, so the path of a job reads top-down (enqueue → claim → handler → settle)
 * without an import back to the queue.
 *
 * @example
 * const worker = new QueueWorker({ store: statements, settings, upkeep }, handlers, { concurrency: 8 });
 */
export interface WorkerPort {
  /** The claim, settle, lease, reap and progress statements (the queue's `JobStatements`). */
  readonly store: ClaimStore & SettleStore & LeaseStore & ReapStore & ProgressStore;
  /** Where to LISTEN, defaults and limits, logger, telemetry, pool and payload schemas. */
  readonly settings: QueueSettings;
  /** Health gauges, retention and the scheduler, run on timers. */
  readonly upkeep: QueueUpkeep;
}
