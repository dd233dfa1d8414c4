import { defineConfig } from 'vitest/config';

// One PostgreSQL server per test run (test/global-setup.ts); each integration/property test file
// creates its own database from a migrated template, so files never share tables.
export default defineConfig({
  test: {
    globalSetup: ['./test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      { extends: true, test: { name: 'integration', include: ['test/integration/**/*.test.ts'] } },
      { extends: true, test: { name: 'property', include: ['test/property/**/*.test.ts'] } },
      {
        // The TxManager, pattern and queue integration suites again, through a real PgBouncer in
        // transaction pooling mode (test/helpers.ts starts one per file; what needs a session of its
        // own — Schedule, LISTEN — uses the direct URL, see docs/pgbouncer.md).
        extends: true,
        test: {
          name: 'pgbouncer',
          include: [
            'test/integration/tx-*.test.ts',
            'test/integration/patterns-*.test.ts',
            'test/integration/queue-*.test.ts',
          ],
          env: { PG_TXKIT_VIA_PGBOUNCER: 'transaction' },
        },
      },
      {
        extends: true,
        test: { name: 'reliability', include: ['test/reliability/**/*.test.ts'], testTimeout: 180_000 },
      },
    ],
  },
});
