// Public surface of the queue module (re-exports only).
export type { ClaimedLease, EnqueuedJob, Job, JobLease, JobState } from './job.js';
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
export type { ScheduleDefinition } from './schedules/schedule-options.js';
export type { ScheduleFiring, SchedulePassResult } from './schedules/schedule-pass.js';
export { type FireSchedulesOptions, type ScheduleState, scheduledTick } from './schedules/schedule-state.js';
export type { DeclaredSchedule, MissedPolicy, StoredSchedule } from './schedules/schedule-types.js';
export type { MigrateResult } from './schema/migrate-queue.js';
export type { BoundedCount, QueueMetrics } from './store/queue-health.js';
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
} from './worker/work-options.js';
export { QueueWorker } from './worker/worker.js';
