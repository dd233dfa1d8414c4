import { randomBytes } from 'node:crypto';
import { err, ok } from 'neverthrow';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { migrateSingleRun, singleRun } from '../../src/advisory/single-run.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { lockReport } from '../../src/diagnostics/lock-report.js';
import { cancelBackend, terminateBackend } from '../../src/diagnostics/signal-backend.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { lockRows } from '../../src/patterns/lock-rows.js';
import { updateWhere } from '../../src/patterns/update-where.js';
import { upsert } from '../../src/patterns/upsert.js';
import { Queue } from '../../src/queue/queue.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { urlAs, useTestDatabase } from '../helpers.js';

// The library under least privilege: no superuser anywhere below, only the grants that
// docs/security.md lists. Two roles, as in production:
// - migrator (deploy time): CONNECT + CREATE on the database (CREATE SCHEMA for the queue, the trusted
//   extension btree_gist) and ownership of the `app` schema it creates (tables, constraints, indexes).
// - app (run time): CONNECT, USAGE on the schemas, SELECT/INSERT/UPDATE/DELETE on the tables, USAGE on
//   sequences — given once with ALTER DEFAULT PRIVILEGES FOR ROLE migrator, so later migrations are covered.
// - ops (diagnostics): pg_monitor to see every session, pg_signal_backend to cancel/terminate them.
const { pool: admin, url, db } = await useTestDatabase({ max: 4 });
const suffix = randomBytes(4).toString('hex');
const roles = { migrator: `txk_migrator_${suffix}`, app: `txk_app_${suffix}`, ops: `txk_ops_${suffix}` };
const password = randomBytes(12).toString('hex');
const q = (name: string) => pg.escapeIdentifier(name);

/** A URL of this database as `role`. */
function as(role: string): string {
  return urlAs(url, role, password);
}

// Exactly the grants of docs/security.md (run by an administrator once).
await admin.query(`
  CREATE ROLE ${q(roles.migrator)} LOGIN PASSWORD '${password}' NOSUPERUSER NOCREATEDB NOCREATEROLE;
  CREATE ROLE ${q(roles.app)} LOGIN PASSWORD '${password}' NOSUPERUSER NOCREATEDB NOCREATEROLE;
  CREATE ROLE ${q(roles.ops)} LOGIN PASSWORD '${password}' NOSUPERUSER NOCREATEDB NOCREATEROLE IN ROLE pg_monitor, pg_signal_backend;
  REVOKE ALL ON DATABASE ${q(db.name)} FROM PUBLIC;
  REVOKE CREATE ON SCHEMA public FROM PUBLIC;
  GRANT CONNECT, CREATE ON DATABASE ${q(db.name)} TO ${q(roles.migrator)};
  GRANT CONNECT ON DATABASE ${q(db.name)} TO ${q(roles.app)}, ${q(roles.ops)};
  ALTER DEFAULT PRIVILEGES FOR ROLE ${q(roles.migrator)} GRANT USAGE ON SCHEMAS TO ${q(roles.app)};
  ALTER DEFAULT PRIVILEGES FOR ROLE ${q(roles.migrator)}
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${q(roles.app)};
  ALTER DEFAULT PRIVILEGES FOR ROLE ${q(roles.migrator)} GRANT USAGE, SELECT ON SEQUENCES TO ${q(roles.app)};
  -- The template installs btree_gist as superuser; drop it so the migrator's CREATE EXTENSION is real.
  DROP EXTENSION IF EXISTS btree_gist;
`);

const migratorPool = new pg.Pool({ connectionString: as(roles.migrator), max: 4 });
const appPool = new pg.Pool({ connectionString: as(roles.app), max: 6 });
const opsPool = new pg.Pool({ connectionString: as(roles.ops), max: 2 });
for (const p of [migratorPool, appPool, opsPool]) p.on('error', () => {});
const migrator = new TxManager(migratorPool);
const tm = new TxManager(appPool);

afterAll(async () => {
  await Promise.all([migratorPool.end(), appPool.end(), opsPool.end()]);
  // Roles are cluster-wide: drop what they own in this database, then the roles.
  await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                      WHERE usename IN ('${roles.migrator}', '${roles.app}', '${roles.ops}')`);
  for (const role of Object.values(roles)) {
    await admin.query(`DROP OWNED BY ${q(role)} CASCADE; DROP ROLE ${q(role)}`);
  }
});

const rooms = new Bookings({ table: 'app.bookings', resource: 'room', during: 'during' });
const keys = (manager: TxManager) => new IdempotencyKeys(manager, { table: 'app.idempotency_keys' });
const queueOn = (pool: pg.Pool, manager: TxManager) =>
  new Queue({ pool, txManager: manager, schema: 'txk_queue', tasks: { mail: z.object({ to: z.string() }) } });

describe('least privilege: migrate as the migrator role (no superuser)', () => {
  it('the roles really are unprivileged', async () => {
    const { rows } = await admin.query<{ rolname: string; rolsuper: boolean; rolcreatedb: boolean }>(
      'SELECT rolname, rolsuper, rolcreatedb FROM pg_roles WHERE rolname = ANY($1) ORDER BY rolname',
      [Object.values(roles)],
    );
    expect(rows.every((r) => !r.rolsuper && !r.rolcreatedb)).toBe(true);
    expect(rows).toHaveLength(3);
  });

  it('creates the app schema and tables it owns', async () => {
    await migratorPool.query(`
      CREATE SCHEMA app;
      CREATE TABLE app.accounts (id int PRIMARY KEY, balance int NOT NULL CHECK (balance >= 0));
      CREATE TABLE app.users (id serial PRIMARY KEY, email text NOT NULL UNIQUE, name text);
      CREATE TABLE app.bookings (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL);
      CREATE TABLE app.posts (id serial PRIMARY KEY, day text NOT NULL)`);
  });

  it('Bookings.migrate: CREATE EXTENSION btree_gist (trusted) + the EXCLUDE constraint', async () => {
    const r = await rooms.migrate(migratorPool);
    expect(r._unsafeUnwrap()).toEqual({ created: true });
    const ext = await admin.query("SELECT 1 FROM pg_extension WHERE extname = 'btree_gist'");
    expect(ext.rowCount).toBe(1);
  });

  it('IdempotencyKeys.migrate, migrateSingleRun, Queue.migrate', async () => {
    expect((await keys(migrator).migrate()).isOk()).toBe(true);
    expect((await migrateSingleRun(migratorPool, { table: 'app.single_run' })).isOk()).toBe(true);
    const migrated = await queueOn(migratorPool, migrator).migrate();
    expect(migrated.isOk(), migrated.isErr() ? migrated.error.message : '').toBe(true);
  });
});

describe('least privilege: run as the app role (DML only)', () => {
  it('cannot do DDL (the grants are really minimal)', async () => {
    await expect(appPool.query('CREATE TABLE app.nope (id int)')).rejects.toMatchObject({ code: '42501' });
    await expect(appPool.query('CREATE SCHEMA nope')).rejects.toMatchObject({ code: '42501' });
  });

  it('TxManager + updateWhere + lockRows + insertOnce + upsert', async () => {
    await appPool.query('INSERT INTO app.accounts VALUES (1, 100), (2, 0)');
    const moved = await tm.do(async (tx) => {
      const locked = await lockRows(tx, { table: 'app.accounts', ids: [2, 1] });
      if (locked.isErr()) return err(locked.error);
      const debit = await updateWhere(tx, {
        text: 'UPDATE app.accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2',
        values: [1, 30],
      });
      if (debit.isErr()) return err(debit.error);
      await tx.query('UPDATE app.accounts SET balance = balance + 30 WHERE id = 2');
      return ok(locked.value.rows.length);
    });
    expect(moved._unsafeUnwrap()).toBe(2);
    const first = await insertOnce(appPool, {
      table: 'app.users',
      values: { email: 'a@x' },
      conflict: ['email'],
    });
    const again = await insertOnce(appPool, {
      table: 'app.users',
      values: { email: 'a@x' },
      conflict: ['email'],
    });
    expect([first._unsafeUnwrap().created, again._unsafeUnwrap().created]).toEqual([true, false]);
    const up = await upsert(appPool, {
      table: 'app.users',
      values: { email: 'a@x', name: 'Ann' },
      conflict: { constraint: 'users_email_key' },
    });
    expect(up._unsafeUnwrap()).toMatchObject({ created: false, row: { name: 'Ann' } });
  });

  it('Bookings.book / move / cancel', async () => {
    const booked = await tm.do((tx) =>
      rooms.book<{ id: number }>(tx, { resource: 7, from: '2030-01-01T10:00Z', to: '2030-01-01T11:00Z' }),
    );
    const id = booked._unsafeUnwrap().id;
    const clash = await rooms.book(appPool, {
      resource: 7,
      from: '2030-01-01T10:30Z',
      to: '2030-01-01T12:00Z',
    });
    expect(clash.isErr() && clash.error.kind).toBe('Overlap');
    expect(
      (await rooms.move(appPool, id, { from: '2030-01-01T12:00Z', to: '2030-01-01T13:00Z' })).isOk(),
    ).toBe(true);
    expect((await rooms.cancel(appPool, id)).isOk()).toBe(true);
  });

  it('IdempotencyKeys.run (advisory xact lock + key row) and expire', async () => {
    const k = keys(tm);
    const first = await k.run('req-1', () => ({ paid: 1 }));
    const replay = await k.run('req-1', () => ({ paid: 2 }));
    expect(first._unsafeUnwrap()).toEqual({ result: { paid: 1 }, replayed: false });
    expect(replay._unsafeUnwrap()).toEqual({ result: { paid: 1 }, replayed: true });
    expect((await k.expire('7d')).isOk()).toBe(true);
  });

  it('singleRun + withAdvisoryLock (advisory locks need no privilege)', async () => {
    const run = () =>
      singleRun(tm, { name: 'daily', key: '2030-01-01', table: 'app.single_run' }, async (tx) => {
        await tx.query("INSERT INTO app.posts (day) VALUES ('2030-01-01')");
        return 'posted';
      });
    expect((await run())._unsafeUnwrap()).toBe('posted');
    const second = await run();
    expect(second.isErr() && second.error.kind).toBe('AlreadyDone');
    const locked = await withAdvisoryLock(tm, advisoryKey('tenant', 1), () => 'ran', { wait: 'try' });
    expect(locked._unsafeUnwrap()).toBe('ran');
  });

  it('Queue: enqueue (in a transaction) / claim / complete / fail / stats / reap', async () => {
    const queue = queueOn(appPool, tm);
    const enq = await tm.do(async (tx) => {
      await tx.query("INSERT INTO app.users (email) VALUES ('b@x')");
      return queue.enqueue(tx, 'mail', { to: 'b@x' }, { key: 'welcome:b' });
    });
    expect(enq._unsafeUnwrap().created).toBe(true);
    expect((await queue.enqueueMany(appPool, 'mail', [{ to: 'c@x' }, { to: 'd@x' }])).isOk()).toBe(true);
    const jobs = (await queue.claim({ batch: 3 }))._unsafeUnwrap();
    expect(jobs).toHaveLength(3);
    const [a, b, c] = jobs as [(typeof jobs)[0], (typeof jobs)[0], (typeof jobs)[0]];
    expect((await queue.complete(a)).isOk()).toBe(true);
    expect((await queue.extend(b, '1m')).isOk()).toBe(true);
    expect((await queue.fail(b, 'smtp down', { final: true }))._unsafeUnwrap().state).toBe('dead');
    expect((await queue.release([c]))._unsafeUnwrap()).toEqual([c.id]);
    expect((await queue.redrive({ task: 'mail' }))._unsafeUnwrap()).toEqual([b.id]);
    expect((await queue.reap()).isOk()).toBe(true);
    const stats = (await queue.stats())._unsafeUnwrap();
    expect(stats.pending).toBe(2);
  });

  it('Queue worker (poll + LISTEN) runs handlers under the app role', async () => {
    const queue = queueOn(appPool, tm);
    let done = 0;
    let allDone: () => void = () => {};
    const finished = new Promise<void>((resolve) => {
      allDone = resolve;
    });
    const worker = queue.work(
      {
        mail: async () => {
          done++;
          if (done === 2) allDone();
        },
      },
      { pollInterval: 50 },
    );
    await finished;
    await worker.stop();
    expect(done).toBe(2);
  });
});

describe('least privilege: diagnostics as the ops role (pg_monitor, pg_signal_backend)', () => {
  it('lockReport sees the app role’s blocked session; cancelBackend cancels it', async () => {
    const holder = await appPool.connect();
    const waiter = new pg.Client({ connectionString: as(roles.app) });
    waiter.on('error', () => {});
    await waiter.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT * FROM app.accounts WHERE id = 1 FOR UPDATE');
      const waiterPid = (await waiter.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]
        ?.pid as number;
      const blocked = waiter
        .query('UPDATE app.accounts SET balance = balance WHERE id = 1')
        .catch((e: unknown) => e);
      // Wait (bounded) until the server shows the wait.
      for (let i = 0; i < 200; i++) {
        const { rows } = await opsPool.query('SELECT cardinality(pg_blocking_pids($1)) AS n', [waiterPid]);
        if (rows[0]?.n > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      const report = (await lockReport(opsPool))._unsafeUnwrap();
      expect(JSON.stringify(report)).toContain(String(waiterPid));
      expect(report.visibility).toMatchObject({ limited: false });
      expect((await cancelBackend(opsPool, waiterPid))._unsafeUnwrap()).toEqual({
        pid: waiterPid,
        signalled: true,
      });
      expect(await blocked).toMatchObject({ code: '57014' });
      await holder.query('ROLLBACK');
      expect((await terminateBackend(opsPool, waiterPid, { timeout: '5s' }))._unsafeUnwrap().signalled).toBe(
        true,
      );
    } finally {
      holder.release();
      await waiter.end().catch(() => {});
    }
  });

  it('without pg_signal_backend the app role cannot signal another role’s backend (42501)', async () => {
    const other = new pg.Client({ connectionString: as(roles.ops) });
    other.on('error', () => {});
    await other.connect();
    try {
      const pid = (await other.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]
        ?.pid as number;
      const r = await cancelBackend(appPool, pid);
      expect(r.isErr() && r.error.kind === 'DbError' && r.error.code).toBe('42501');
    } finally {
      await other.end();
    }
  });
});
