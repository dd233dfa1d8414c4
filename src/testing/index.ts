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
export {
  allInterleavings,
  type Interleaved,
  type IsolationLevelName,
  interleavingCount,
  type SessionsSteps,
} from './interleavings.js';
export {
  type IsolationSpec,
  parseIsolationSpec,
  type SpecBlocker,
  type SpecPermutation,
  type SpecPermutationStep,
  type SpecSession,
  type SpecStep,
  SpecSyntaxError,
  specPermutations,
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
  Schedule,
  ScheduleError,
  type ScheduleErrorReason,
  type ScheduleOptions,
  type ScheduleStep,
  type ScheduleStepSpec,
  type StatementResult,
  type StepBlocker,
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
