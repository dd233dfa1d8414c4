// Public surface of 'pg-txkit/knex' (re-exports only).
export { type KnexConfigInput, knexConfig } from './knex-config.js';
