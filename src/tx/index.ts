// Public surface of the transaction module (re-exports only).
export type { AfterCommit, AfterRollback, Db, Isolation, Queryable, Tx } from './types.js';
export { inTransaction, isTx, TX } from './types.js';
