// Public surface of 'pg-txkit/drizzle' (re-exports only).
export type { BuilderOptions as DrizzleClientOptions } from '../shared/builder-options.js';
export { drizzleClient } from './drizzle-client.js';
export { DrizzleTxPool } from './drizzle-pool.js';
