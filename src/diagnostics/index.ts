// Public surface of this module (re-exports only).
export {
  type BlockingForest,
  type BlockingNode,
  buildBlockingForest,
  queuedBehind,
} from './blocking-forest.js';
export { cancelBackend } from './cancel-backend.js';
export { type DdlInspection, inspectDdl } from './ddl-statement.js';
export {
  type AdvisoryLockHolder,
  advisoryKeyParts,
  type LockCascade,
  type LockReport,
  type LockReportOptions,
  lockReport,
  type SuggestedAction,
  type Visibility,
} from './lock-report.js';
export { redactQuery, truncateQuery } from './redact-query.js';
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
