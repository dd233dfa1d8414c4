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
    'MigrationChanged',
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
    'RETRY_TABLE',
    'ReadOnlyTransaction',
    'RetriesExhausted',
    'SINGLE_RUN_TABLE',
    'SQLSTATE',
    'ScheduleFailed',
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
    'capabilities',
    'cancelBackend',
    'classify',
    'findLeakedAdvisoryLocks',
    'formatAdvisoryKey',
    'insertOnce',
    'isAdvisoryKey',
    'isRetryable',
    'isTx',
    'keyFromLockTag',
    'listAdvisoryLocks',
    'lockReport',
    'lockRows',
    'migrateSingleRun',
    'safeDdl',
    'scheduledTick',
    'singleRun',
    'terminateBackend',
    'updateWhere',
    'upsert',
    'withAdvisoryLock',
  ],
  'pg-txkit/testing': [
    'CONSISTENCY_MODELS',
    'FORBIDDEN_ANOMALIES',
    'FaultProxy',
    'HistoryError',
    'ListAppendRecorder',
    'MAX_SPEC_PERMUTATIONS',
    'PgBouncerNotInstalled',
    'PostgresStartError',
    'RegisterRecorder',
    'Schedule',
    'ScheduleError',
    'SpecRunError',
    'SpecSyntaxError',
    'SpecTooManyPermutations',
    'allInterleavings',
    'checkHistory',
    'createTestDatabase',
    'eachSpecPermutation',
    'ensureTemplate',
    'explore',
    'formatOutcomes',
    'formatResultSet',
    'gate',
    'interleavingCount',
    'parseIsolationSpec',
    'runIsolationSpec',
    'specPermutationCount',
    'specPermutations',
    'startPgBouncer',
    'startPostgres',
    'unusedSteps',
    'withDatabase',
  ],
  'pg-txkit/testing/arbitraries': ['interleavings', 'isolationLevel'],
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

describe('every entry point of package.json exports is pinned', () => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    name: string;
    exports: Record<string, string | { types?: string }>;
  };
  const entries = Object.entries(pkg.exports)
    .filter(([, target]) => typeof target === 'object' && typeof target.types === 'string')
    .map(([subpath]) => (subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`));

  it.each(entries)('%s has its runtime names listed here and an API report in api/', (entry) => {
    expect(Object.keys(EXPECTED)).toContain(entry);
    const report = new URL(`../../api/${entry.replaceAll('/', '-')}.api.md`, import.meta.url);
    expect(existsSync(report), `run \`npm run api:report\` and commit ${report.pathname}`).toBe(true);
  });
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
