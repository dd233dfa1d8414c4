// Public surface of the queue module (re-exports only).
export type { EnqueuedJob, Job, JobLease, JobState } from './job.js';
export type { MigrateResult } from './migrate-queue.js';
export {
  type ClaimOptions,
  type CompleteManyResult,
  type EnqueueError,
  type EnqueueManyOptions,
  type EnqueueManyResult,
  type EnqueueOptions,
  type FailItem,
  type FailOptions,
  type FailResult,
  type MetricsOptions,
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
export type { BoundedCount, QueueMetrics } from './queue-health.js';
export type {
  JobContext,
  JobEndEvent,
  JobHandler,
  JobOutcome,
  WorkerCounters,
  WorkerHooks,
  WorkerPhase,
  WorkHandlers,
  WorkOptionsInput,
} from './work-options.js';
export { workOptionsSchema } from './work-options.js';
export { QueueWorker } from './worker.js';
