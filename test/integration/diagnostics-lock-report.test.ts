import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancelBackend, lockReport, terminateBackend } from '../../src/diagnostics/index.js';
import { Schedule } from '../../src/testing/schedule.js';
import { useTestDatabase } from '../helpers.js';
import { client, pidOf, waitUntilBlocked } from './diagnostics-support.js';

const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query('CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL)');
  await pool.query('INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10) g');
  await pool.query('CREATE TABLE orders (id int PRIMARY KEY, total int)');
  await pool.query('INSERT INTO orders VALUES (1, 10), (2, 20)');
});

async function report(options: Parameters<typeof lockReport>[1] = {}) {
  const r = await lockReport(pool, options);
  if (r.isErr()) throw r.error;
  return r.value;
}

describe('lockReport', () => {
  it('finds a row-lock chain of 3 sessions (transactionid waits, not only relation locks) with the right root', async () => {
    const holder = await client(url, 'holder');
    const s = await Schedule.open(url, { sessions: ['t2', 't3'], blockTimeoutMs: 20_000, blockers: 'any' });
    try {
      await holder.query('BEGIN');
      await holder.query('UPDATE acct SET n = n + 1 WHERE id = 1');
      const holderPid = await pidOf(holder);
      // Autocommit updates: each finishes as soon as the one ahead of it commits.
      const running = s.run([
        ['t2', 'update acct set n = n + 1 where id = 1'],
        ['t3', 'update acct set n = n + 1 where id = 1'],
      ]);
      await waitUntilBlocked(pool, [s.pid('t2'), s.pid('t3')]);

      const r = await report();
      expect(r.forest).toHaveLength(1);
      const root = r.forest[0];
      expect(root?.session.pid).toBe(holderPid);
      expect(root?.session.state).toBe('idle in transaction');
      expect(root?.blockedCount).toBe(2);
      const t2 = root?.children[0];
      expect(t2?.session.pid).toBe(s.pid('t2'));
      expect(t2?.session.waitingFor?.locktype).toBe('transactionid');
      expect(t2?.session.waitingFor?.transactionId).toMatch(/^\d+$/);
      expect(t2?.children[0]?.session.pid).toBe(s.pid('t3'));
      expect(r.cascades).toHaveLength(0);
      expect(r.healthy).toBe(false);
      expect(r.suggestions[0]).toMatchObject({
        pid: holderPid,
        action: 'terminate',
        sql: `SELECT pg_terminate_backend(${holderPid});`,
      });

      await holder.query('COMMIT');
      const out = await running;
      expect(out.map((o) => [o.status, o.blocked])).toEqual([
        ['ok', true],
        ['ok', true],
      ]);
      expect((await pool.query('SELECT n FROM acct WHERE id = 1')).rows[0]).toEqual({ n: 3 });
    } finally {
      await s.close();
      await holder.end();
    }
  });

  it('names the waiting ALTER TABLE as the root cause of a lock-queue cascade, with the session it waits for', async () => {
    const holder = await client(url, 'long-report');
    const s = await Schedule.open(url, {
      sessions: ['alter', 'r1', 'r2', 'r3'],
      blockTimeoutMs: 20_000,
      blockers: 'any',
    });
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT count(*) FROM orders'); // ACCESS SHARE, kept until COMMIT
      const holderPid = await pidOf(holder);
      const running = s.run([
        ['alter', 'alter table orders add column delivery_notes text'],
        ['r1', 'select count(*) from orders'],
        ['r2', 'select count(*) from orders'],
        ['r3', "select * from orders where id = 1 /* customer 'x@y.z' */"],
      ]);
      const queued = [s.pid('r1'), s.pid('r2'), s.pid('r3')].sort((a, b) => a - b);
      await waitUntilBlocked(pool, [s.pid('alter'), ...queued]);

      const r = await report({ redact: true });
      expect(r.cascades).toHaveLength(1);
      const c = r.cascades[0];
      expect(c?.rootCause.pid).toBe(s.pid('alter'));
      expect(c?.mode).toBe('AccessExclusiveLock');
      expect(c?.relation).toBe('orders');
      expect(c?.waitsFor).toEqual([holderPid]);
      expect(c?.queued).toEqual(queued);
      // The tree: the long transaction, the ALTER under it, the readers under the ALTER.
      const root = r.forest[0];
      expect(root?.session.pid).toBe(holderPid);
      expect(root?.children.map((n) => n.session.pid)).toEqual([s.pid('alter')]);
      expect(root?.children[0]?.children.map((n) => n.session.pid).sort((a, b) => a - b)).toEqual(queued);
      // The first suggestion cancels the ALTER (the queue drains at once).
      expect(r.suggestions[0]).toMatchObject({ pid: s.pid('alter'), action: 'cancel' });
      // Redaction keeps no literal.
      const r3 = r.sessions.find((x) => x.pid === s.pid('r3'));
      expect(r3?.query).toBe('select * from orders where id = $?');

      await holder.query('COMMIT');
      const out = await running;
      expect(out.every((o) => o.status === 'ok')).toBe(true);
    } finally {
      await s.close();
      await holder.end();
    }
  });

  it('reports a session idle in transaction past the threshold, and terminateBackend ends it', async () => {
    const idle = await client(url, 'forgot-to-commit');
    const quiet = await client(url, 'idle-outside-tx');
    try {
      await idle.query('BEGIN');
      await idle.query('SELECT * FROM acct WHERE id = 2 FOR UPDATE');
      await quiet.query('SELECT 1');
      const idlePid = await pidOf(idle);
      const quietPid = await pidOf(quiet);

      const r = await report({ idleInTransactionMs: 0 });
      expect(r.idleInTransaction.map((x) => x.pid)).toContain(idlePid);
      // Only this database by default (other test files share the server); all of them on request.
      expect(r.sessions.every((x) => x.database === r.database)).toBe(true);
      const everywhere = await report({ idleInTransactionMs: 0, allDatabases: true });
      expect(everywhere.sessions.length).toBeGreaterThanOrEqual(r.sessions.length);
      expect(everywhere.sessions.map((x) => x.pid)).toContain(idlePid);
      expect(r.idleInTransaction.map((x) => x.pid)).not.toContain(quietPid);
      const mine = r.idleInTransaction.find((x) => x.pid === idlePid);
      expect(mine?.applicationName).toBe('forgot-to-commit');
      expect(mine?.locksHeld).toBeGreaterThan(0);
      expect(r.suggestions.find((x) => x.pid === idlePid)?.action).toBe('terminate');
      // Not past a long threshold.
      expect((await report({ idleInTransactionMs: '1h' })).idleInTransaction.map((x) => x.pid)).not.toContain(
        idlePid,
      );

      const t = await terminateBackend(pool, idlePid, { timeout: '5s' });
      expect(t.isOk() && t.value).toEqual({ pid: idlePid, signalled: true });
      const gone = await terminateBackend(pool, idlePid);
      expect(gone.isErr() && gone.error.kind).toBe('NotFound');
    } finally {
      await idle.end().catch(() => {});
      await quiet.end();
    }
  });

  it('cancelBackend cancels a running statement (57014) and reports a missing pid as NotFound', async () => {
    const busy = await client(url, 'busy');
    try {
      const busyPid = await pidOf(busy);
      const sleeping = busy.query('SELECT pg_sleep(30)').then(
        () => 'finished',
        (e: { code?: string }) => e.code,
      );
      // Wait until the statement is running (bounded poll of pg_stat_activity).
      for (let i = 0; i < 1500; i++) {
        const { rows } = await pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'",
          [busyPid],
        );
        if (rows.length > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      const c = await cancelBackend(pool, busyPid);
      expect(c.isOk() && c.value).toEqual({ pid: busyPid, signalled: true });
      expect(await sleeping).toBe('57014');
      const missing = await cancelBackend(pool, 2_147_000_000);
      expect(missing.isErr() && missing.error.kind).toBe('NotFound');
      const bad = await cancelBackend(pool, -1);
      expect(bad.isErr() && bad.error.kind).toBe('InvalidOptions');
    } finally {
      await busy.end();
    }
  });

  it('reports advisory lock holders with their 64-bit key reassembled, and the session waiting behind one', async () => {
    const holder = await client(url, 'leader');
    const waiter = await client(url, 'follower');
    const key = -1234567890123456789n;
    try {
      await holder.query('SELECT pg_advisory_lock($1::int8)', [key.toString()]);
      await holder.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [7, -3]);
      const holderPid = await pidOf(holder);
      const waiterPid = await pidOf(waiter);
      const waiting = waiter.query('SELECT pg_advisory_lock($1::int8)', [key.toString()]);
      await waitUntilBlocked(pool, [waiterPid]);

      const r = await report({ advisoryIdleMs: 0 });
      const held = r.advisoryLocks.filter((a) => a.pid === holderPid);
      expect(held.map((a) => a.key).sort()).toEqual([key.toString(), '7,-3'].sort());
      const big = held.find((a) => a.key64 !== null);
      expect(big).toMatchObject({ key64: key, granted: true, sessionLevel: true, mode: 'ExclusiveLock' });
      expect(big?.suspectedLeak).toBe(true);
      expect(held.find((a) => a.key32 !== null)?.key32).toEqual([7, -3]);
      expect(r.advisoryLocks.find((a) => a.pid === waiterPid)).toMatchObject({
        granted: false,
        key: key.toString(),
      });
      const root = r.forest.find((n) => n.session.pid === holderPid);
      expect(root?.children[0]?.session.pid).toBe(waiterPid);
      expect(root?.children[0]?.session.waitingFor).toMatchObject({
        locktype: 'advisory',
        advisoryKey: key.toString(),
      });

      await holder.query('SELECT pg_advisory_unlock_all()');
      await waiting;
      await waiter.query('SELECT pg_advisory_unlock_all()');
    } finally {
      await holder.end();
      await waiter.end();
    }
  });

  it('suggests terminate (not cancel) for an idle session whose session advisory lock blocks another, and the suggestion frees the waiter', async () => {
    const holder = await client(url, 'idle-leader');
    const waiter = await client(url, 'blocked-follower');
    const key = 4242424242n;
    try {
      await holder.query('SELECT pg_advisory_lock($1::int8)', [key.toString()]);
      const holderPid = await pidOf(holder);
      const waiterPid = await pidOf(waiter);
      const waiting = waiter.query('SELECT pg_advisory_lock($1::int8)', [key.toString()]);
      await waitUntilBlocked(pool, [waiterPid]);

      // Default thresholds: the holder is not (yet) a suspected leak, only an idle blocker.
      const r = await report();
      const suggestion = r.suggestions.find((s) => s.pid === holderPid);
      expect(suggestion).toMatchObject({
        action: 'terminate',
        sql: `SELECT pg_terminate_backend(${holderPid});`,
      });
      expect(suggestion?.reason).toMatch(/idle/);

      // Doing what the report says frees the waiter (a cancel would do nothing to an idle session).
      await pool.query(suggestion?.sql ?? '');
      await waiting;
      await waiter.query('SELECT pg_advisory_unlock_all()');
    } finally {
      await holder.end().catch(() => {});
      await waiter.end();
    }
  });

  it('shows a deadlock as a wait cycle before the detector runs, and cancelBackend breaks it', async () => {
    const s = await Schedule.open(url, { sessions: ['a', 'b'], blockTimeoutMs: 20_000 });
    try {
      const running = s.run([
        ['a', 'begin'],
        ['a', "set local deadlock_timeout = '30s'"], // the detector stays out of the way
        ['b', 'begin'],
        ['b', "set local deadlock_timeout = '30s'"],
        ['a', 'update acct set n = n + 1 where id = 5'],
        ['b', 'update acct set n = n + 1 where id = 6'],
        ['a', 'update acct set n = n + 1 where id = 6'], // waits for b
        ['b', 'update acct set n = n + 1 where id = 5'], // waits for a: a cycle
      ]);
      await waitUntilBlocked(pool, [s.pid('a'), s.pid('b')]);
      const r = await report();
      expect(r.waitCycles).toEqual([[s.pid('a'), s.pid('b')].sort((x, y) => x - y)]);
      expect(r.forest).toHaveLength(1);
      expect(r.forest[0]?.blockedCount).toBe(1);

      const cancelled = await cancelBackend(pool, s.pid('b'));
      expect(cancelled.isOk()).toBe(true);
      const out = await running;
      expect(out[7]).toMatchObject({ session: 'b', status: 'error', code: '57014' });
      expect(out[6]).toMatchObject({ session: 'a', status: 'ok', blocked: true });
      await s.run([
        ['a', 'commit'],
        ['b', 'rollback'],
      ]);
    } finally {
      await s.close();
    }
  });

  it('refuses invalid options before any query', async () => {
    const r = await lockReport(pool, { idleInTransactionMs: 'soon' as never });
    expect(r.isErr() && r.error.kind).toBe('InvalidOptions');
  });
});

describe('lockReport as a non-superuser', () => {
  const suffix = randomBytes(4).toString('hex');
  const monitorRole = `txk_mon_${suffix}`;
  const plainRole = `txk_plain_${suffix}`;
  const password = `pw_${suffix}`;
  const as = (role: string) => {
    const u = new URL(url);
    u.username = role;
    u.password = password;
    return u.toString();
  };
  const pools: pg.Pool[] = [];
  const open = (role: string) => {
    const p = new pg.Pool({ connectionString: as(role), max: 2 });
    p.on('error', () => {});
    pools.push(p);
    return p;
  };

  beforeAll(async () => {
    // Roles are cluster-wide: unique names, dropped after.
    await pool.query(`CREATE ROLE ${monitorRole} LOGIN PASSWORD '${password}' IN ROLE pg_monitor`);
    await pool.query(`CREATE ROLE ${plainRole} LOGIN PASSWORD '${password}'`);
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await pool.query(`DROP ROLE IF EXISTS ${monitorRole}`);
    await pool.query(`DROP ROLE IF EXISTS ${plainRole}`);
  });

  it('with pg_monitor sees every session, and without it says what it could not see', async () => {
    const idle = await client(url, 'superuser-idle-tx');
    try {
      const idlePid = await pidOf(idle);
      await idle.query('BEGIN');
      await idle.query('SELECT * FROM acct WHERE id = 3 FOR UPDATE');

      const asMonitor = await lockReport(open(monitorRole), { idleInTransactionMs: 0 });
      if (asMonitor.isErr()) throw asMonitor.error;
      expect(asMonitor.value.role).toBe(monitorRole);
      expect(asMonitor.value.visibility).toEqual({ limited: false, reason: null, hiddenSessions: 0 });
      const seen = asMonitor.value.idleInTransaction.find((x) => x.pid === idlePid);
      expect(seen?.query).toContain('FOR UPDATE');

      const plain = open(plainRole);
      const asPlain = await lockReport(plain, { idleInTransactionMs: 0 });
      if (asPlain.isErr()) throw asPlain.error;
      expect(asPlain.value.visibility.limited).toBe(true);
      expect(asPlain.value.visibility.hiddenSessions).toBeGreaterThan(0);
      expect(asPlain.value.visibility.reason).toContain('pg_monitor');
      const hidden = asPlain.value.sessions.find((x) => x.pid === idlePid);
      expect(hidden?.hidden).toBe(true);
      expect(hidden?.query).toBe('<insufficient privilege>');

      // A plain role may not signal a superuser's backend: a typed 42501, nothing signalled.
      const denied = await cancelBackend(plain, idlePid);
      expect(denied.isErr() && denied.error.kind).toBe('DbError');
      expect(denied.isErr() && 'code' in denied.error && denied.error.code).toBe('42501');
      await idle.query('ROLLBACK');
    } finally {
      await idle.end();
    }
  });
});
