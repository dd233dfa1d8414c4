// Public surface of the transaction module (re-exports only).

export type { Backoff } from './backoff.js';
export type { Duration } from './duration.js';
export type {
  CallbackErrorEvent,
  CommitEvent,
  PoolErrorEvent,
  RetryEvent,
  RollbackEvent,
  SlowTransactionEvent,
  TxHooks,
} from './hooks.js';
export { isRetryable, RETRY_MODES, RETRY_TABLE, type RetryMode, type RetryRule } from './retryable.js';
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
  PROPAGATIONS,
  type Propagation,
  RETRYABLE_KINDS,
  type RetryableKind,
  type TxOptions,
  type TxSettings,
} from './tx-options.js';
export { TxUsageError, type TxUsageReason } from './tx-usage-error.js';
export type { AfterCommit, AfterRollback, Db, Isolation, Queryable, Tx } from './types.js';
export { isTx } from './types.js';
