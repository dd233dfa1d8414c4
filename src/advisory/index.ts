// Public surface of the advisory-locks module (re-exports only).
export {
  type AdvisoryKey,
  type AdvisoryKeyPair,
  type AnyAdvisoryKey,
  advisoryKey,
  advisoryKeyPair,
  formatAdvisoryKey,
  isAdvisoryKey,
  keyFromLockTag,
} from './advisory-key.js';
export {
  type AdvisoryLockInfo,
  type FindLeakedAdvisoryLocksOptions,
  findLeakedAdvisoryLocks,
  type ListAdvisoryLocksOptions,
  listAdvisoryLocks,
} from './find-leaked-advisory-locks.js';
export {
  SessionLock,
  type SessionLockError,
  type SessionLockLostReason,
  type SessionLockOptions,
  type SessionLockReleased,
  type SessionLockTarget,
  TransactionPoolerDetected,
} from './session-lock.js';
export {
  migrateSingleRun,
  SINGLE_RUN_TABLE,
  type SingleRunError,
  type SingleRunSpec,
  singleRun,
} from './single-run.js';
export {
  type AdvisoryLockError,
  acquireXactLocks,
  type LockedCallback,
  type WithAdvisoryLockOptions,
  withAdvisoryLock,
} from './with-advisory-lock.js';
