import { readdirSync } from 'node:fs';
import { defineConfig } from 'vitest/config';
import { findPgBouncer } from './src/testing/pgbouncer.js';

/**
 * Set by `.ci/run`: a run without pgbouncer fails instead of skipping the PgBouncer suites. (Not `CI`,
 * which every CI service sets, also for a user's project that merely installs pg-txkit.)
 */
const REQUIRE_PGBOUNCER_ENV = 'PG_TXKIT_REQUIRE_PGBOUNCER';

/** Integration files run through PgBouncer by the `pgbouncer` project (a second pass over them). */
const THROUGH_PGBOUNCER = /^(tx|patterns|queue)-.*\.test\.ts$/;
/** Integration files that start a PgBouncer themselves. */
const NEED_PGBOUNCER = [
  'pgbouncer-advisory.test.ts',
  'pgbouncer-capabilities.test.ts',
  'pgbouncer-pooler-probe.test.ts',
  'security-pooler-refusal.test.ts',
];

const integrationFiles = readdirSync(new URL('./test/integration/', import.meta.url));
const pgbouncer = await findPgBouncer();
if (!pgbouncer) {
  const suites = integrationFiles.filter((f) => THROUGH_PGBOUNCER.test(f)).length + NEED_PGBOUNCER.length;
  if (process.env[REQUIRE_PGBOUNCER_ENV] === '1') {
    throw new Error(
      `pgbouncer not installed but ${REQUIRE_PGBOUNCER_ENV}=1: the ${suites} PgBouncer suites cannot run; \`apt-get install pgbouncer\``,
    );
  }
  // vitest evaluates this file once per project: say it once per process.
  const said = Symbol.for('pg-txkit.pgbouncer-skip-notice');
  const slot = globalThis as { [said]?: true };
  if (!slot[said]) {
    slot[said] = true;
    process.stderr.write(
      `pgbouncer not installed: ${suites} PgBouncer suites skipped; \`apt-get install pgbouncer\` to run them\n`,
    );
  }
}

// One PostgreSQL server per test run (test/global-setup.ts); each integration/property test file
// creates its own database from a migrated template, so files never share tables.
// `npm test` runs every project but `reliability` (soak-style, minutes long: `npm run test:reliability`).
export default defineConfig({
  test: {
    globalSetup: ['./test/global-setup.ts', './test/prisma-client-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          exclude: pgbouncer ? [] : NEED_PGBOUNCER.map((f) => `test/integration/${f}`),
        },
      },
      { extends: true, test: { name: 'property', include: ['test/property/**/*.test.ts'] } },
      // The TxManager, pattern and queue integration suites again, through a real PgBouncer in
      // transaction pooling mode (test/helpers.ts starts one per file; what needs a session of its
      // own — Schedule, LISTEN — uses the direct URL, see docs/pgbouncer.md).
      ...(pgbouncer
        ? [
            {
              extends: true as const,
              test: {
                name: 'pgbouncer',
                include: [
                  'test/integration/tx-*.test.ts',
                  'test/integration/patterns-*.test.ts',
                  'test/integration/queue-*.test.ts',
                ],
                // LISTEN needs a session of its own: behind a transaction-mode pooler the worker refuses
                // it (tested in security-pooler-refusal), so the LISTEN suite runs direct only.
                // queue-rates-real-time starts a server of its own (it restarts it): no PgBouncer in front.
                // queue-function-plans measures the plans ONE server backend keeps across calls: behind a
                // transaction-mode pooler each call may land on another backend, with plans of its own.
                exclude: [
                  'test/integration/queue-listen.test.ts',
                  'test/integration/queue-rates-real-time.test.ts',
                  'test/integration/queue-function-plans.test.ts',
                ],
                env: { PG_TXKIT_VIA_PGBOUNCER: 'transaction' },
              },
            },
          ]
        : []),
      {
        extends: true,
        test: { name: 'reliability', include: ['test/reliability/**/*.test.ts'], testTimeout: 180_000 },
      },
    ],
  },
});
