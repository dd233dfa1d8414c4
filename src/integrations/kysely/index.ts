// Public surface of 'pg-txkit/kysely' (re-exports only).
export type { BuilderOptions as KyselyDialectOptions } from '../shared/builder-options.js';
export { kyselyDialect } from './kysely-dialect.js';
