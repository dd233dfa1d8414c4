// Public surface of the queue module (re-exports only).
export type { EnqueuedJob, Job, JobLease, JobState } from './job.js';
export { Queue } from './queue.js';
export type {
  CancelResult,
  ClaimOptions,
  EnqueueError,
  EnqueueManyOptions,
  EnqueueManyResult,
  EnqueueOptions,
  FailOptions,
  GroupLimits,
  GroupsOption,
  JobInfo,
  MetricsOptions,
  PruneOptions,
  PruneResult,
  QueueOptions,
  QueueStats,
  RateLimit,
  ReapOptions,
  RedriveOptions,
  SettleError,
} from './queue-types.js';
export type { ScheduleDefinition } from './schedules/schedule-options.js';
export type { ScheduleFiring, SchedulePassResult } from './schedules/schedule-pass.js';
export { type FireSchedulesOptions, type ScheduleState, scheduledTick } from './schedules/schedule-state.js';
export type { DeclaredSchedule, MissedPolicy, StoredSchedule } from './schedules/schedule-types.js';
export type { MigrateResult } from './schema/migrate-queue.js';
export type {
  CompleteManyResult,
  FailItem,
  FailResult,
  QueueTxManager,
  ReapResult,
  TaskMap,
} from './store/job-store.js';
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
