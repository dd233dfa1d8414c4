import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PGBOUNCER_BINARY_ENV, pgBouncerCandidates } from '../../src/testing/pgbouncer.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VITEST = fileURLToPath(new URL('../../node_modules/vitest/vitest.mjs', import.meta.url));

/** `vitest list --filesOnly` (loads the config, imports no test file) with pgbouncer hidden. */
function listWithoutPgBouncer(env: Record<string, string>) {
  const r = spawnSync(process.execPath, [VITEST, 'list', '--filesOnly'], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, [PGBOUNCER_BINARY_ENV]: '/nonexistent/pgbouncer', ...env },
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('a machine without pgbouncer', () => {
  it('skips the PgBouncer suites with one line, also when CI is set (every CI service sets it)', () => {
    const r = listWithoutPgBouncer({ CI: 'true', PG_TXKIT_REQUIRE_PGBOUNCER: '' });
    expect(r.code).toBe(0);
    const lines = r.stderr.split('\n').filter((l) => l.includes('pgbouncer not installed'));
    expect(lines).toEqual([
      expect.stringMatching(
        /^pgbouncer not installed: \d+ PgBouncer suites skipped; `apt-get install pgbouncer` to run them$/,
      ),
    ]);
    expect(r.stdout).not.toMatch(/^\[pgbouncer\]/m);
    expect(r.stdout).not.toContain('pgbouncer-advisory.test.ts');
    expect(r.stdout).toContain('tx-manager.test.ts');
  });

  it('fails the run when PG_TXKIT_REQUIRE_PGBOUNCER=1 (as .ci/run sets)', () => {
    const r = listWithoutPgBouncer({ PG_TXKIT_REQUIRE_PGBOUNCER: '1' });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/pgbouncer not installed but PG_TXKIT_REQUIRE_PGBOUNCER=1/);
  });
});

describe('pgBouncerCandidates', () => {
  it('an explicit binary, then $PG_TXKIT_PGBOUNCER, then the Debian paths and PATH', () => {
    expect(pgBouncerCandidates('/x/pgbouncer', { PG_TXKIT_PGBOUNCER: '/y' })).toEqual(['/x/pgbouncer']);
    expect(pgBouncerCandidates(undefined, { PG_TXKIT_PGBOUNCER: '/y' })).toEqual(['/y']);
    expect(pgBouncerCandidates(undefined, { PATH: '/a:/b' })).toEqual([
      '/usr/sbin/pgbouncer',
      '/usr/bin/pgbouncer',
      '/usr/local/bin/pgbouncer',
      '/a/pgbouncer',
      '/b/pgbouncer',
    ]);
  });
});
