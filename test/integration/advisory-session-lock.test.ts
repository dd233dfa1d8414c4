import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { findLeakedAdvisoryLocks, listAdvisoryLocks } from '../../src/advisory/find-leaked-advisory-locks.js';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
const opened: SessionLock[] = [];

/** Resolves with the abort reason once `signal` aborts; fails after a generous bound (never a timing assertion). */
function lostWithin(signal: AbortSignal, boundMs = 15_000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const timer = setTimeout(() => reject(new Error(`lost did not fire within ${boundMs} ms`)), boundMs);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve(signal.reason);
    });
  });
}

async function acquire(...args: Parameters<typeof SessionLock.acquire>): Promise<SessionLock> {
  const lock = (await SessionLock.acquire(...args))._unsafeUnwrap();
  opened.push(lock);
  return lock;
}

async function advisoryCount(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return rows[0]!.n;
}

afterEach(async () => {
  await Promise.all(opened.splice(0).map((l) => l.release()));
});
afterAll(async () => {
  expect(await advisoryCount()).toBe(0);
  expect(pool.totalCount - pool.idleCount).toBe(0); // no client left checked out
});

describe('SessionLock', () => {
  it('try: a second contender gets LockBusy; release() unlocks on the same session and is idempotent', async () => {
    const key = advisoryKey('leader', 'basic');
    const lock = await acquire(pool, key, { checkEvery: 200 });
    expect(lock.held).toBe(true);
    const second = await SessionLock.acquire(pool, key, { pooler: 'direct' });
    expect(second.isErr() && second.error.kind).toBe('LockBusy');
    const listed = (await listAdvisoryLocks(pool))._unsafeUnwrap();
    expect(listed).toEqual([
      expect.objectContaining({
        pid: lock.pid,
        key,
        granted: true,
        applicationName: 'pg-txkit:session-lock',
      }),
    ]);
    const first = lock.release();
    expect(lock.release()).toBe(first); // the same promise
    expect(await first).toEqual({ unlocked: true });
    expect(lock.held).toBe(false);
    expect(lock.lost.aborted).toBe(false); // release is not a loss
    const third = await acquire(pool, key, { pooler: 'direct' });
    expect(third.held).toBe(true);
  });

  it('block: waits for the holder, bounded by lockTimeout → LockNotAvailable, and by signal', async () => {
    const key = advisoryKey('leader', 'block');
    const holder = await acquire(url, key, { pooler: 'direct' });
    const timedOut = await SessionLock.acquire(url, key, {
      wait: 'block',
      lockTimeout: 100,
      pooler: 'direct',
    });
    expect(timedOut.isErr() && timedOut.error.kind).toBe('LockNotAvailable');
    const controller = new AbortController();
    const waiting = SessionLock.acquire(url, key, {
      wait: 'block',
      signal: controller.signal,
      pooler: 'direct',
    });
    for (let i = 0; i < 500; i++) {
      const { rows } = await pool.query("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
      if (rows.length) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    controller.abort(new Error('shutting down'));
    const aborted = await waiting;
    expect(aborted.isErr() && aborted.error.kind).toBe('LockNotAvailable');
    const next = SessionLock.acquire(url, key, { wait: 'block', lockTimeout: '10s', pooler: 'direct' });
    await holder.release();
    const got = (await next)._unsafeUnwrap();
    opened.push(got);
    expect(got.held).toBe(true);
  });

  it('lost fires when the backend is terminated (pg_terminate_backend)', async () => {
    const key = advisoryKey('leader', 'terminated');
    const reasons: string[] = [];
    const lock = await acquire(pool, key, { checkEvery: 100, onLost: (e) => reasons.push(e.kind) });
    await pool.query('SELECT pg_terminate_backend($1)', [lock.pid]);
    const reason = (await lostWithin(lock.lost)) as { kind: string };
    expect(reason.kind).toBe('LeaseLost');
    expect(lock.lostReason).toBe('connection-error');
    expect(lock.held).toBe(false);
    await Promise.resolve();
    expect(reasons).toEqual(['LeaseLost']);
    expect(await lock.release()).toEqual({ unlocked: false });
    // the lock went with the session: another leader can take it
    expect((await acquire(pool, key, { wait: 'block', lockTimeout: '10s' })).held).toBe(true);
  });

  it('lost fires when the provider proxy drops the connection (FaultProxy.dropAll)', async () => {
    const proxy = await FaultProxy.start({ target: url });
    try {
      const key = advisoryKey('leader', 'dropped');
      const lock = await acquire(proxy.url, key, { checkEvery: 100 });
      proxy.dropAll();
      expect(((await lostWithin(lock.lost)) as { kind: string }).kind).toBe('LeaseLost');
      expect(lock.lostReason).toBe('connection-error');
      expect((await acquire(url, key, { wait: 'block', lockTimeout: '10s' })).held).toBe(true);
    } finally {
      await proxy.close();
    }
  });

  it('lost fires when the connection stalls (black hole); the server frees the orphan after serverIdleTimeout', async () => {
    const proxy = await FaultProxy.start({ target: url });
    try {
      const key = advisoryKey('leader', 'stalled');
      const lock = await acquire(proxy.url, key, {
        checkEvery: 100,
        checkTimeout: 300,
        serverIdleTimeout: 1000,
      });
      proxy.stall(); // no error, no FIN: the check simply never answers
      await lostWithin(lock.lost);
      expect(lock.lostReason).toBe('check-timeout');
      // the backend behind the stalled proxy still holds the lock until idle_session_timeout ends it
      const next = await acquire(url, key, { wait: 'block', lockTimeout: '15s' });
      expect(next.held).toBe(true);
    } finally {
      proxy.dropAll();
      await proxy.close();
    }
  });
});

describe('lock and unlock on the same client (a pool.query lock and unlock land on different clients)', () => {
  /**
   * The incident's sequence on a pool: lock through the pool, a concurrent request checks out the
   * pooled client that holds the lock, then unlock through the pool.
   */
  async function naiveLockUnlock(p: pg.Pool, key: bigint): Promise<void> {
    await p.query('SELECT pg_try_advisory_lock($1)', [key.toString()]);
    const concurrentRequest = await p.connect(); // e.g. an HTTP handler
    const unlocking = p.query('SELECT pg_advisory_unlock($1)', [key.toString()]);
    concurrentRequest.release();
    await unlocking;
  }

  async function sessionLockLockUnlock(p: pg.Pool, key: bigint): Promise<void> {
    const lock = (await SessionLock.acquire(p, key, { pooler: 'direct' }))._unsafeUnwrap();
    const concurrentRequest = await p.connect(); // the pool is fully usable: the lock has its own connection
    await concurrentRequest.query('SELECT 1');
    concurrentRequest.release();
    expect(await lock.release()).toEqual({ unlocked: true });
  }

  async function leakedAfter(max: number, run: (p: pg.Pool, key: bigint) => Promise<void>): Promise<number> {
    const p = new pg.Pool({ connectionString: url, max, application_name: `naive-pool-${max}` });
    p.on('error', () => {});
    try {
      const key = advisoryKey('daily-post', `retry-${max}-${run.name}`);
      await run(p, key);
      const leaked = (await findLeakedAdvisoryLocks(pool, { idleFor: 0 }))._unsafeUnwrap();
      for (const l of leaked) {
        expect(l).toMatchObject({ key, applicationName: `naive-pool-${max}`, state: 'idle', granted: true });
        expect(l.clientAddr).toBe('127.0.0.1');
      }
      return leaked.length;
    } finally {
      await p.end();
    }
  }

  it('naive control: pool.query lock + pool.query unlock leaks on a pool of many (not on a pool of 1); findLeakedAdvisoryLocks catches it', async () => {
    expect(await leakedAfter(1, naiveLockUnlock)).toBe(0);
    expect(await leakedAfter(10, naiveLockUnlock)).toBe(1);
  });

  it('SessionLock gives the same result on a pool of 1 and a pool of many: no leak', async () => {
    expect(await leakedAfter(1, sessionLockLockUnlock)).toBe(0);
    expect(await leakedAfter(10, sessionLockLockUnlock)).toBe(0);
  });

  it('findLeakedAdvisoryLocks ignores sessions idle for less than idleFor, and transaction-scoped locks', async () => {
    const c = await pool.connect();
    try {
      await c.query('SELECT pg_advisory_lock(99)');
      expect((await findLeakedAdvisoryLocks(pool, { idleFor: '1h' }))._unsafeUnwrap()).toEqual([]);
      expect((await findLeakedAdvisoryLocks(pool, { idleFor: 0 }))._unsafeUnwrap()).toHaveLength(1);
      await c.query('SELECT pg_advisory_unlock(99)');
      await c.query('BEGIN');
      await c.query('SELECT pg_advisory_xact_lock(98)');
      expect((await findLeakedAdvisoryLocks(pool, { idleFor: 0 }))._unsafeUnwrap()).toEqual([]);
      expect((await listAdvisoryLocks(pool))._unsafeUnwrap().map((l) => l.key)).toEqual([98n]);
      await c.query('ROLLBACK');
      const bad = await findLeakedAdvisoryLocks(pool, { idleFor: 'a while' });
      expect(bad.isErr() && bad.error.kind).toBe('InvalidOptions');
    } finally {
      c.release();
    }
  });
});

describe('SessionLock options', () => {
  it('invalid options or key → InvalidOptions before connecting', async () => {
    const badKey = await SessionLock.acquire('postgres://nowhere.invalid/db', 2n ** 64n);
    expect(badKey.isErr() && badKey.error.kind).toBe('InvalidOptions');
    const badOption = await SessionLock.acquire('postgres://nowhere.invalid/db', 1n, { checkEvery: 1 });
    expect(badOption.isErr() && badOption.error.kind).toBe('InvalidOptions');
  });

  it('serverIdleTimeout: a bound the session would hit between two checks is refused; false disables it', async () => {
    // A 1 ms bound made the server end the session while acquire was still running (57P05 →
    // ConnectionLost), and a bound shorter than checkEvery ends a healthy session between two checks.
    const key = advisoryKey('leader', 'idle-bound');
    for (const serverIdleTimeout of [1, 0, 999, 200]) {
      const r = await SessionLock.acquire(pool, key, { checkEvery: 200, serverIdleTimeout });
      expect(r.isErr() && r.error.kind, `serverIdleTimeout ${serverIdleTimeout}`).toBe('InvalidOptions');
    }
    const disabled = await acquire(pool, key, {
      checkEvery: 200,
      serverIdleTimeout: false,
      pooler: 'direct',
    });
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1 AND application_name = 'pg-txkit:session-lock'",
      [disabled.pid],
    );
    expect(rows[0]?.n).toBe(1);
    await disabled.release();
  });
});
