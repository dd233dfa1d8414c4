import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

// The runtime exports of the built package, as a consumer imports them ('pg-txkit' and
// 'pg-txkit/testing' resolve to dist/ through package.json's exports). An export added by accident (an
// internal helper re-exported by a module index) fails here; a deliberate one is added to the list
// together with its documentation in README.md or docs/.
const EXPECTED = {
  'pg-txkit': [
    'AlreadyDone',
    'Bookings',
    'CheckViolation',
    'CommitOutcomeUnknown',
    'ConditionFailed',
    'ConnectionLost',
    'DEFAULT_RETRY_ON',
    'DbError',
    'DeadlockDetected',
    'ExclusionViolation',
    'ForeignKeyViolation',
    'ISOLATION_LEVELS',
    'IdempotencyConflict',
    'IdempotencyKeys',
    'IdleInTransactionTimeout',
    'InProgress',
    'InvalidOptions',
    'JobCancelled',
    'LeaseLost',
    'LockBusy',
    'LockNotAvailable',
    'NotFound',
    'NotInTransaction',
    'NotNullViolation',
    'Overlap',
    'PROPAGATIONS',
    'PoolExhausted',
    'QueryTimeout',
    'Queue',
    'QueueWorker',
    'RETRYABLE_KINDS',
    'RETRY_MODES',
    'ReadOnlyTransaction',
    'RetriesExhausted',
    'SINGLE_RUN_TABLE',
    'SQLSTATE',
    'SerializationFailure',
    'SessionLock',
    'StatementTimeout',
    'TransactionPoolerDetected',
    'TxKitError',
    'TxManager',
    'TxUsageError',
    'UniqueViolation',
    'UnknownTask',
    'Unsupported',
    'acquireXactLocks',
    'advisoryKey',
    'advisoryKeyPair',
    'advisoryKeyParts',
    'beginSql',
    'buildBlockingForest',
    'capabilities',
    'cancelBackend',
    'classify',
    'durationSchema',
    'engineOf',
    'findLeakedAdvisoryLocks',
    'formatAdvisoryKey',
    'fullJitterDelay',
    'insertOnce',
    'inspectDdl',
    'isAdvisoryKey',
    'isTx',
    'keyFromLockTag',
    'listAdvisoryLocks',
    'lockReport',
    'lockRows',
    'lockTagOf',
    'mergeTxOptions',
    'migrateSingleRun',
    'parseTxOptions',
    'planScope',
    'queuedBehind',
    'redactQuery',
    'safeDdl',
    'scheduledTick',
    'singleRun',
    'singleRunTableSql',
    'terminateBackend',
    'truncateQuery',
    'txOptionsSchema',
    'updateWhere',
    'upsert',
    'withAdvisoryLock',
    'withRetry',
    'workOptionsSchema',
  ],
  'pg-txkit/testing': [
    'FaultProxy',
    'PgBouncerNotInstalled',
    'PostgresStartError',
    'Schedule',
    'ScheduleError',
    'SpecRunError',
    'SpecSyntaxError',
    'allInterleavings',
    'createTestDatabase',
    'ensureTemplate',
    'explore',
    'formatOutcomes',
    'formatResultSet',
    'gate',
    'interleavingCount',
    'interleavings',
    'isolationLevel',
    'parseIsolationSpec',
    'runIsolationSpec',
    'specPermutations',
    'startPgBouncer',
    'startPostgres',
    'withDatabase',
  ],
  'pg-txkit/kysely': ['kyselyDialect'],
  'pg-txkit/knex': ['knexConfig'],
  'pg-txkit/drizzle': ['DrizzleTxPool', 'drizzleClient'],
  'pg-txkit/prisma': ['prismaAdapter'],
} as const;

const DIST = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

describe('public runtime exports (the built package)', () => {
  it.each(Object.keys(EXPECTED) as (keyof typeof EXPECTED)[])(
    '%s exports exactly the documented names',
    async (entry) => {
      expect(existsSync(DIST), 'dist/ is missing: run `npm run build` first').toBe(true);
      const ns: Record<string, unknown> = await import(entry);
      expect(Object.keys(ns).sort()).toEqual([...EXPECTED[entry]].sort());
    },
  );
});

describe('the root entry without any query builder installed', () => {
  it("'pg-txkit' and 'pg-txkit/testing' import nothing from a query builder (only their own subpaths do)", () => {
    const seen = new Set<string>();
    const bare = new Set<string>();
    const walk = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(
        /(?:import|export)[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g,
      )) {
        const spec = m[1] ?? m[2] ?? '';
        if (spec.startsWith('.')) walk(fileURLToPath(new URL(spec, pathToFileURL(file))));
        else bare.add(spec.split('/')[0] ?? spec);
      }
    };
    walk(DIST);
    walk(fileURLToPath(new URL('../../dist/testing/index.js', import.meta.url)));
    expect(seen.size).toBeGreaterThan(50);
    const builders = ['kysely', 'knex', 'drizzle-orm', '@prisma', 'prisma'];
    expect([...bare].filter((name) => builders.includes(name))).toEqual([]);
  });
});
