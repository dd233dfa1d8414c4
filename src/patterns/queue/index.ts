// Public surface of the queue module (re-exports only).
export type { EnqueuedJob, Job, JobLease, JobState } from './job.js';
export { type MigrateResult, migrateQueue } from './migrate-queue.js';
export {
  type ClaimOptions,
  type CompleteManyResult,
  type EnqueueError,
  type EnqueueManyOptions,
  type EnqueueManyResult,
  type EnqueueOptions,
  errorText as jobErrorText,
  type FailItem,
  type FailOptions,
  type FailResult,
  Queue,
  type QueueOptions,
  type QueueStats,
  type QueueTxManager,
  type ReapOptions,
  type ReapResult,
  type RedriveOptions,
  type SettleError,
  type TaskMap,
} from './queue.js';
export { SettleBatcher, type SettleBatcherOptions, type SettleOutcome } from './settle-batcher.js';
export type { InvalidLease } from './split-leases.js';
export {
  HandlerTimeoutError,
  type JobContext,
  type JobEndEvent,
  type JobHandler,
  type JobOutcome,
  QueueWorker,
  type WorkerCounters,
  type WorkerHooks,
  type WorkerPhase,
  type WorkHandlers,
  type WorkOptionsInput,
  workOptionsSchema,
} from './worker.js';
