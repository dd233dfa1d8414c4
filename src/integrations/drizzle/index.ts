// Public surface of 'pg-txkit/drizzle' (re-exports only).
export { type DrizzleClientOptions, drizzleClient } from './drizzle-client.js';
export { DrizzleTxPool } from './drizzle-pool.js';
export type { DrizzlePropagation } from './drizzle-transaction-client.js';
