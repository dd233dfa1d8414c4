import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { capabilities } from '../../src/capabilities/capabilities.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { urlAs, useTestDatabase } from '../helpers.js';

// capabilities() against the real server of this run (the PgBouncer side is
// test/integration/pgbouncer-capabilities.test.ts), and the start-up check of Bookings.migrate().
const { pool: admin, url, db } = await useTestDatabase({ max: 4 });
const suffix = randomBytes(4).toString('hex');
const password = randomBytes(12).toString('hex');
const q = (name: string) => pg.escapeIdentifier(name);
const roles = {
  owner: `txk_caps_owner_${suffix}`,
  plain: `txk_caps_plain_${suffix}`,
  ro: `txk_caps_ro_${suffix}`,
};

function as(role: string): string {
  return urlAs(url, role, password);
}

await admin.query(`
  CREATE ROLE ${q(roles.owner)} LOGIN PASSWORD '${password}' NOSUPERUSER;
  CREATE ROLE ${q(roles.plain)} LOGIN PASSWORD '${password}' NOSUPERUSER;
  CREATE ROLE ${q(roles.ro)} LOGIN PASSWORD '${password}' NOSUPERUSER;
  ALTER ROLE ${q(roles.ro)} SET default_transaction_read_only = on;
  GRANT CONNECT ON DATABASE ${q(db.name)} TO ${q(roles.owner)}, ${q(roles.plain)}, ${q(roles.ro)};
  GRANT USAGE, CREATE ON SCHEMA public TO ${q(roles.plain)}, ${q(roles.owner)};
`);
afterAll(async () => {
  // The roles own nothing outside this database, which the helper drops after the file.
  await admin.query(`DROP OWNED BY ${q(roles.owner)}, ${q(roles.plain)}, ${q(roles.ro)}`).catch(() => {});
});

async function sessionsOf(applicationName: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
    [applicationName],
  );
  return rows[0]!.n;
}

describe('capabilities() on PostgreSQL, direct', () => {
  it('finds everything this library uses, with the server version of SHOW server_version_num', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const result = await capabilities(pool);
      expect(result.isOk()).toBe(true);
      const caps = result._unsafeUnwrap();
      const { rows } = await admin.query<{ n: string; v: string }>(
        "SELECT current_setting('server_version_num') AS n, version() AS v",
      );
      expect(caps).toMatchObject({
        engine: 'postgresql',
        version: rows[0]!.v,
        serverVersionNum: Number(rows[0]!.n),
        transactionPooler: undefined,
        readOnly: false,
        inRecovery: false,
        advisoryLocks: true,
        sessionLocks: true,
        listenNotify: true,
        skipLocked: true,
        btreeGist: 'installed', // the test template has it
        exclusionConstraints: true,
        serializable: true,
        savepoints: true,
      });
      expect(caps.unsupported).toEqual({});
      expect(Object.isFrozen(caps)).toBe(true);
      expect(Object.isFrozen(caps.unsupported)).toBe(true);
      // It used connections of its own, not the pool's (max 1: nothing was checked out or left idle).
      expect(pool.totalCount).toBe(0);
    } finally {
      await pool.end();
    }
  });

  it('leaves nothing behind: its sessions are closed, no advisory lock, no listener', async () => {
    const result = await capabilities(url);
    expect(result.isOk()).toBe(true);
    // Its connections are ended before it returns; the server may take a moment to reap the backends,
    // so wait for that with the server's own view instead of a sleep.
    await expect.poll(() => sessionsOf('pg-txkit:capabilities')).toBe(0);
    const { rows } = await admin.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'",
    );
    expect(rows[0]!.n).toBe(0);
  });

  it('a read-only role: readOnly, and savepoints and serializable still work', async () => {
    const caps = (await capabilities(as(roles.ro)))._unsafeUnwrap();
    expect(caps.readOnly).toBe(true);
    expect(caps.inRecovery).toBe(false);
    expect(caps.savepoints).toBe(true);
    expect(caps.serializable).toBe(true);
  });

  it('btree_gist: installable with CREATE on the database, not-permitted without (extension dropped first)', async () => {
    await admin.query('DROP EXTENSION btree_gist');
    try {
      await admin.query(`GRANT CREATE ON DATABASE ${q(db.name)} TO ${q(roles.owner)}`);
      const owner = (await capabilities(as(roles.owner)))._unsafeUnwrap();
      expect(owner.btreeGist).toBe('installable');
      expect(owner.unsupported.btreeGist).toBeUndefined();
      const plain = (await capabilities(as(roles.plain)))._unsafeUnwrap();
      expect(plain.btreeGist).toBe('not-permitted');
      expect(plain.unsupported.btreeGist).toMatch(/CREATE EXTENSION btree_gist/);
      // A read-only session may not install it, whatever its rights: CREATE EXTENSION fails with 25006.
      await admin.query(`GRANT CREATE ON DATABASE ${q(db.name)} TO ${q(roles.ro)}`);
      const ro = (await capabilities(as(roles.ro)))._unsafeUnwrap();
      expect(ro.btreeGist).toBe('read-only');
      expect(ro.unsupported.btreeGist).toMatch(/read-only session.*CREATE EXTENSION btree_gist/);
    } finally {
      await admin.query('CREATE EXTENSION IF NOT EXISTS btree_gist');
    }
  });

  it('advisory lock functions that lock nothing (a stub that always returns true) are caught', async () => {
    // What CockroachDB shipped for years: pg_try_advisory_xact_lock that answers true to everyone. A
    // schema searched before pg_catalog gives this session such a stub for real.
    await admin.query(`
      CREATE SCHEMA IF NOT EXISTS lock_stub;
      CREATE OR REPLACE FUNCTION lock_stub.pg_try_advisory_xact_lock(bigint) RETURNS boolean
        LANGUAGE sql AS 'SELECT true';
    `);
    const stubbed = (
      await capabilities({ connectionString: url, options: '-c search_path=lock_stub,pg_catalog' })
    )._unsafeUnwrap();
    expect(stubbed.advisoryLocks).toBe(false);
    expect(stubbed.unsupported.advisoryLocks).toMatch(/two sessions at once/);
    expect(stubbed.sessionLocks).toBe(false);
    // The real functions on the same server: true.
    expect((await capabilities(url))._unsafeUnwrap().advisoryLocks).toBe(true);
  });

  it('a server that cannot be reached is an Err (ConnectionLost), not a throw', async () => {
    const u = new URL(url);
    u.port = '1'; // nothing listens there
    const result = await capabilities(u.toString());
    expect(result.isErr() && result.error.kind).toBe('ConnectionLost');
  });
});

describe('Bookings.migrate() checks btree_gist first', () => {
  it('a role that may not install btree_gist gets Unsupported naming the extension and the fix, and nothing is changed', async () => {
    await admin.query('DROP EXTENSION btree_gist');
    const pool = new pg.Pool({ connectionString: as(roles.plain), max: 2 });
    try {
      await pool.query(
        'CREATE TABLE plain_rooms (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL)',
      );
      const result = await new Bookings({
        table: 'plain_rooms',
        resource: 'room_id',
        during: 'during',
      }).migrate(pool);
      expect(result.isErr()).toBe(true);
      const error = result._unsafeUnwrapErr();
      expect(error.kind).toBe('Unsupported');
      expect(error).toMatchObject({ capability: 'btreeGist' });
      expect(error.message).toMatch(/btree_gist/);
      expect(error.message).toMatch(/CREATE EXTENSION btree_gist/);
      const { rows } = await admin.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_constraint WHERE conrelid = 'plain_rooms'::regclass AND contype = 'x'",
      );
      expect(rows[0]!.n).toBe(0);
    } finally {
      await pool.end();
      await admin.query('CREATE EXTENSION IF NOT EXISTS btree_gist');
    }
  });
});
