// The implementation is shared with terminateBackend (signal-backend.ts); this file names the export.
export { cancelBackend, type SignalError, type SignalResult } from './signal-backend.js';
