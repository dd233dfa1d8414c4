// The implementation is shared with cancelBackend (signal-backend.ts); this file names the export.
export {
  type SignalError,
  type SignalResult,
  type TerminateBackendOptions,
  terminateBackend,
} from './signal-backend.js';
