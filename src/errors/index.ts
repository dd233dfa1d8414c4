export { classify, isConnectionError } from './classify.js';
export * from './errors.js';
export { SQLSTATE, type SqlStateEntry, sqlState } from './sqlstate.js';
