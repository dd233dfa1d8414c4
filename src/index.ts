// Public surface of 'pg-txkit' (re-exports only): what README.md and docs/ document, nothing else
// (test/unit/public-exports.test.ts lists it; an export added by accident fails there).

export * from './advisory/index.js';
export * from './capabilities/index.js';
export * from './diagnostics/index.js';
export {
  AlreadyDone,
  type AttemptRecord,
  type CapabilityName,
  CheckViolation,
  CommitOutcomeUnknown,
  ConditionFailed,
  ConnectionLost,
  type ConstraintFields,
  classify,
  type DatabaseFailure,
  DbError,
  DeadlockDetected,
  type DriverErrorFields,
  ExclusionViolation,
  ForeignKeyViolation,
  IdempotencyConflict,
  IdleInTransactionTimeout,
  InProgress,
  InvalidOptions,
  JobCancelled,
  LeaseLost,
  LockBusy,
  LockNotAvailable,
  MigrationChanged,
  NotFound,
  NotInTransaction,
  NotNullViolation,
  type OptionIssue,
  Overlap,
  PoolExhausted,
  QueryTimeout,
  ReadOnlyTransaction,
  RetriesExhausted,
  ScheduleFailed,
  SerializationFailure,
  SQLSTATE,
  type SqlStateEntry,
  StatementTimeout,
  type TxError,
  TxKitError,
  type TxKitErrorKind,
  UniqueViolation,
  UnknownTask,
  Unsupported,
} from './errors/index.js';
export * from './observability/index.js';
export * from './patterns/index.js';
export * from './queue/index.js';
export * from './tx/index.js';
