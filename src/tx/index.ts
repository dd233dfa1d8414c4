// Public surface of the transaction module (re-exports only).

export { type Backoff, fullJitterDelay } from './backoff.js';
export { type BeginSettings, beginSql } from './begin-sql.js';
export { type Duration, durationSchema } from './duration.js';
export type {
  CallbackErrorEvent,
  CommitEvent,
  PoolErrorEvent,
  RetryEvent,
  RollbackEvent,
  SlowTransactionEvent,
  TxHooks,
} from './hooks.js';
export { planScope, type ScopePlan } from './propagation.js';
export { type AttemptOutcome, type RetryPolicy, withRetry } from './retry.js';
export { RETRY_MODES, type RetryMode } from './retryable.js';
export { type ErrOf, type OkOf, type TxCallback, TxManager } from './tx-manager.js';
export type {
  ConstraintErrors,
  ConstraintMap,
  ConstraintViolation,
  TxManagerOptions,
} from './tx-manager-options.js';
export {
  DEFAULT_RETRY_ON,
  ISOLATION_LEVELS,
  type IsolationLevel,
  mergeTxOptions,
  PROPAGATIONS,
  type Propagation,
  parseTxOptions,
  RETRYABLE_KINDS,
  type RetryableKind,
  type TxOptions,
  type TxSettings,
  txOptionsSchema,
} from './tx-options.js';
export { TxUsageError, type TxUsageReason } from './tx-usage-error.js';
export type { AfterCommit, AfterRollback, Db, Isolation, Queryable, Tx } from './types.js';
export { isTx } from './types.js';
