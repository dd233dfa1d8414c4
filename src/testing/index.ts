// Public surface of 'pg-txkit/testing' (re-exports only): what docs/testing.md documents, nothing else
// (test/unit/public-exports.test.ts lists it).
// The fast-check arbitraries (interleavings, isolationLevel) are the entry point
// 'pg-txkit/testing/arbitraries' (src/testing/arbitraries.ts): their declarations need fast-check's
// types, and fast-check is an optional peer.
export {
  type ExploreCounterexample,
  type ExploreDb,
  type ExploreFastCheck,
  type ExploreInvariant,
  type ExploreOptions,
  type ExploreReport,
  type ExploreStep,
  explore,
} from './explore.js';
export { FaultProxy, type FaultProxyOptions } from './fault-proxy.js';
export { type FormatOutcomesOptions, formatOutcomes } from './format-outcomes.js';
export { type FormatResultSetInput, formatResultSet } from './format-result-set.js';
export { type Gate, gate } from './gate.js';
export type { Anomaly, AnomalyType, DependencyStep } from './history/anomaly.js';
export { type CheckHistoryOptions, checkHistory, type HistoryCheck } from './history/check-history.js';
export {
  CONSISTENCY_MODELS,
  type ConsistencyModel,
  FORBIDDEN_ANOMALIES,
} from './history/consistency-models.js';
export type { DependencyKind } from './history/dependency-graph.js';
export type {
  AppendOp,
  History,
  HistoryKey,
  HistoryTransaction,
  HistoryValue,
  ListAppendHistory,
  ListAppendOp,
  ListReadOp,
  RegisterHistory,
  RegisterOp,
  RegisterReadOp,
  TxOutcome,
  WriteOp,
} from './history/history.js';
export { HistoryError, type HistoryErrorReason } from './history/history-error.js';
export type { HistoryRecorder, RecordedTransaction } from './history/history-recorder.js';
export { ListAppendRecorder, type ListAppendTransaction } from './history/list-append-recorder.js';
export { RegisterRecorder, type RegisterTransaction } from './history/register-recorder.js';
export {
  allInterleavings,
  type Interleaved,
  type IsolationLevelName,
  interleavingCount,
  type SessionsSteps,
} from './interleavings.js';
export {
  eachSpecPermutation,
  type IsolationSpec,
  MAX_SPEC_PERMUTATIONS,
  parseIsolationSpec,
  type SpecBlocker,
  type SpecPermutation,
  type SpecPermutationStep,
  type SpecSession,
  type SpecStep,
  SpecSyntaxError,
  SpecTooManyPermutations,
  specPermutationCount,
  specPermutations,
  unusedSteps,
} from './isolation-spec.js';
export {
  PgBouncerNotInstalled,
  type StartedPgBouncer,
  type StartPgBouncerOptions,
  startPgBouncer,
} from './pgbouncer.js';
export {
  type IsolationSpecRun,
  type RunIsolationSpecOptions,
  runIsolationSpec,
  SpecRunError,
} from './run-isolation-spec.js';
export {
  type NoticesWhileWaiting,
  Schedule,
  ScheduleError,
  type ScheduleErrorReason,
  type ScheduleOptions,
  type ScheduleStep,
  type ScheduleStepSpec,
  type StatementResult,
  type StepBlocker,
  type StepNotification,
  type StepOutcome,
} from './schedule.js';
export {
  type PgMajor,
  type PostgresProvider,
  PostgresStartError,
  type StartedPostgres,
  type StartPostgresOptions,
  startPostgres,
} from './start-postgres.js';
export type { ReplicationLag, StartedStandby, StartStandbyOptions } from './start-standby.js';
export {
  type CreateTestDatabaseOptions,
  createTestDatabase,
  type EnsureTemplateOptions,
  ensureTemplate,
  type TestDatabase,
  withDatabase,
} from './test-database.js';
