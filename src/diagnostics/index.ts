// Public surface of this module (re-exports only).
export type { BlockingForest, BlockingNode } from './blocking-forest.js';
export { cancelBackend } from './cancel-backend.js';
export {
  type AdvisoryLockHolder,
  type LockCascade,
  type LockReport,
  type LockReportOptions,
  lockReport,
  type SuggestedAction,
  type Visibility,
} from './lock-report.js';
export {
  type DdlAttempt,
  type SafeDdlError,
  type SafeDdlOptions,
  type SafeDdlReport,
  safeDdl,
} from './safe-ddl.js';
export type { LockWait, SessionInfo } from './session.js';
export type { SignalError, SignalResult } from './signal-backend.js';
export { type TerminateBackendOptions, terminateBackend } from './terminate-backend.js';
