// Public surface of the queue module (re-exports only).
export type { ClaimedLease, EnqueuedJob, Job, JobLease, JobState } from './job.js';
export type { MigrateResult } from './migrate-queue.js';
export {
  type CancelResult,
  type ClaimedBatch,
  type ClaimOptions,
  type CompleteAndTakeNextResult,
  type CompleteManyResult,
  type EnqueueError,
  type EnqueueManyOptions,
  type EnqueueManyResult,
  type EnqueueOptions,
  type FailItem,
  type FailOptions,
  type FailResult,
  type GroupLimits,
  type GroupsOption,
  type JobInfo,
  type MetricsOptions,
  type PruneOptions,
  type PruneResult,
  Queue,
  type QueueOptions,
  type QueueStats,
  type QueueTxManager,
  type RateLimit,
  type ReapOptions,
  type ReapResult,
  type RedriveOptions,
  type SettleError,
  type TakeNextOptions,
  type TaskMap,
} from './queue.js';
export type { BoundedCount, QueueMetrics } from './queue-health.js';
export type { MissedPolicy, ScheduleDefinition, StoredSchedule } from './schedule-options.js';
export type { DeclaredSchedule, ScheduleFiring, SchedulePassResult } from './schedule-pass.js';
export { type FireSchedulesOptions, type ScheduleState, scheduledTick } from './schedule-state.js';
export type {
  JobContext,
  JobEndEvent,
  JobHandler,
  JobOutcome,
  SkippedTask,
  WorkerCounters,
  WorkerHooks,
  WorkerPhase,
  WorkHandlers,
  WorkOptionsInput,
} from './work-options.js';
export { QueueWorker } from './worker.js';
