import pg from 'pg';
import { afterAll, inject } from 'vitest';
import { type StartedPgBouncer, startPgBouncer } from '../src/testing/pgbouncer.js';
import { createTestDatabase, type TestDatabase } from '../src/testing/test-database.js';

/** pg's own default `max` for a `pg.Pool` (what the README's `new pg.Pool({ connectionString })` gets). */
const PG_DEFAULT_POOL_MAX = 10;

/** The run's server admin URL (from the global setup). */
export function serverUrl(): string {
  return inject('pgUrl');
}

/**
 * `PG_TXKIT_VIA_PGBOUNCER=transaction` (or `session`) runs the test files through PgBouncer: the vitest
 * project `pgbouncer` sets it (see docs/pgbouncer.md).
 */
export const VIA_PGBOUNCER_ENV = 'PG_TXKIT_VIA_PGBOUNCER';

/** The PgBouncer pool mode this run goes through, or undefined for a direct run. */
export function viaPgBouncer(): 'transaction' | 'session' | undefined {
  const mode = process.env[VIA_PGBOUNCER_ENV];
  if (mode === undefined || mode === '' || mode === '0' || mode === 'false') return undefined;
  if (mode === 'transaction' || mode === 'session') return mode;
  throw new Error(`${VIA_PGBOUNCER_ENV} must be 'transaction' or 'session', got ${JSON.stringify(mode)}`);
}

/**
 * A fresh database for this test file plus a pool on it; both are dropped after the file.
 * Call at the top level of a test file: `const db = await useTestDatabase();`
 *
 * - `url`: the DIRECT connection string of the database. Use it for everything that needs a session
 *   of its own: `Schedule.open(url)`, LISTEN, session advisory locks, monitors by backend pid,
 *   pg_stat_activity checks, a `new pg.Client(url)`.
 * - `pool`: the pool the code under test uses. With `PG_TXKIT_VIA_PGBOUNCER=transaction` it goes through
 *   a PgBouncer in transaction mode started for this file (`pooledUrl`), so every transaction may land
 *   on another server connection — the production setting this checks us against.
 */
export async function useTestDatabase(poolOptions: pg.PoolConfig = {}): Promise<{
  db: TestDatabase;
  url: string;
  /** The URL `pool` connects to: PgBouncer's when running through it, else `url`. */
  pooledUrl: string;
  /** The PgBouncer in front of the database, when running through one. */
  bouncer: StartedPgBouncer | undefined;
  pool: pg.Pool;
}> {
  const db = await createTestDatabase(serverUrl());
  const mode = viaPgBouncer();
  // The README's pool: `new pg.Pool({ connectionString })`, pg's default of 10 clients. A test whose
  // scenario needs more connections at once says so with its own `max`.
  const max = poolOptions.max ?? PG_DEFAULT_POOL_MAX;
  // As many server connections as the pool has clients: tests that hold N transactions open at once
  // (gates, deadlock cycles) must not wait on PgBouncer's own pool. Transactions still move between
  // server connections, which is the hazard under test.
  const bouncer = mode
    ? await startPgBouncer({ target: db.url, poolMode: mode, poolSize: max, maxClientConn: max * 4 + 50 })
    : undefined;
  const pooledUrl = bouncer?.url ?? db.url;
  const pool = new pg.Pool({ connectionString: pooledUrl, ...poolOptions });
  afterAll(async () => {
    await pool.end();
    await bouncer?.stop();
    await db.drop();
  });
  return { db, url: db.url, pooledUrl, bouncer, pool };
}

/** `url` with another role and password (a test's least-privileged login). */
export function urlAs(url: string, role: string, password: string): string {
  const u = new URL(url);
  u.username = role;
  u.password = password;
  return u.toString();
}
