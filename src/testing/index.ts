// Public surface of 'pg-txkit/testing' (re-exports only).
export {
  type PostgresProvider,
  PostgresStartError,
  parseStartPostgresOptions,
  providerOrder,
  type StartedPostgres,
  type StartPostgresOptions,
  startPostgres,
} from './start-postgres.js';
export {
  type CreateTestDatabaseOptions,
  createTestDatabase,
  ensureTemplate,
  TEMPLATE_EXTENSIONS,
  type TestDatabase,
  withDatabase,
} from './test-database.js';
