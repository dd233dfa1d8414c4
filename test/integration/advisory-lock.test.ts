import { err } from 'neverthrow';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { advisoryKey, advisoryKeyPair } from '../../src/advisory/advisory-key.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
const tm = new TxManager(pool);

/** Waits (bounded) until `n` sessions wait for an advisory lock — observed from a monitor query. */
async function waitersOnAdvisory(n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
    );
    if (rows[0]!.n >= n) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`never saw ${n} waiter(s) on an advisory lock`);
}

/** Tries the key (bounded) until another transaction can take it. */
async function eventuallyFree(key: bigint, attempts = 250): Promise<boolean> {
  for (let i = 0; i < attempts; i++) {
    const r = await withAdvisoryLock(tm, key, () => true, { wait: 'try' });
    if (r.isOk()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

/** The error kind, looking through RetriesExhausted (maxAttempts: 1 wraps the one failure). */
function lastKind(error: { kind: string; last?: { kind: string } }): string {
  return error.kind === 'RetriesExhausted' && error.last ? error.last.kind : error.kind;
}

async function noLeftovers(): Promise<void> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
  );
  expect(rows[0]!.n).toBe(0);
}

afterAll(async () => {
  await noLeftovers();
  expect(pool.totalCount - pool.idleCount).toBe(0); // no client left checked out
});

describe('withAdvisoryLock: exclusion between two real connections', () => {
  it("wait 'try': the second caller gets LockBusy and its fn is not called; after COMMIT it proceeds", async () => {
    const key = advisoryKey('test', 'try-commit');
    const g = gate();
    const first = withAdvisoryLock(tm, key, async () => {
      await g.at('holding');
      return 'first';
    });
    await g.reached('holding');
    let called = false;
    const second = await withAdvisoryLock(
      tm,
      key,
      () => {
        called = true;
      },
      { wait: 'try' },
    );
    expect(second.isErr() && second.error.kind).toBe('LockBusy');
    expect(second.isErr() && second.error.kind === 'LockBusy' && second.error.keys).toEqual([key.toString()]);
    expect(called).toBe(false);
    g.open('holding');
    expect((await first)._unsafeUnwrap()).toBe('first');
    const third = await withAdvisoryLock(tm, key, () => 'third', { wait: 'try' });
    expect(third._unsafeUnwrap()).toBe('third');
  });

  it("wait 'block': the second waits while the first holds, and runs after the first ROLLS BACK", async () => {
    const key = advisoryKey('test', 'block-rollback');
    const g = gate();
    const events: string[] = [];
    const first = withAdvisoryLock(tm, key, async () => {
      await g.at('holding');
      events.push('first-end');
      return err(new Error('rolled back on purpose'));
    });
    await g.reached('holding');
    const second = withAdvisoryLock(tm, key, () => {
      events.push('second-run');
      return 2;
    });
    await waitersOnAdvisory(1); // the second is blocked on the lock (seen in pg_locks)
    expect(events).toEqual([]);
    g.open('holding');
    expect((await first).isErr()).toBe(true);
    expect((await second)._unsafeUnwrap()).toBe(2);
    expect(events).toEqual(['first-end', 'second-run']);
  });

  it("wait 'block' with lockTimeout → LockNotAvailable (not retried), fn not called; the holder is unaffected", async () => {
    const key = advisoryKey('test', 'timeout');
    const g = gate();
    const first = withAdvisoryLock(tm, key, async () => {
      await g.at('holding');
      return 1;
    });
    await g.reached('holding');
    let calls = 0;
    const second = await withAdvisoryLock(
      tm,
      key,
      () => {
        calls++;
      },
      { lockTimeout: 100 },
    );
    expect(second.isErr() && second.error.kind).toBe('LockNotAvailable');
    expect(calls).toBe(0);
    g.open('holding');
    expect((await first)._unsafeUnwrap()).toBe(1);
  });

  it('lockTimeout only bounds the acquisition: the transaction keeps its own lock_timeout for fn', async () => {
    const key = advisoryKey('test', 'timeout-restored');
    const inside = await withAdvisoryLock(
      tm,
      key,
      async (tx) => (await tx.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout,
      { lockTimeout: '150ms', tx: { lockTimeout: '3s' } },
    );
    expect(inside._unsafeUnwrap()).toBe('3s');
  });

  it('joins the current transaction: the lock lasts until the OUTER transaction ends', async () => {
    const key = advisoryKey('test', 'join');
    const g = gate();
    const outer = tm.do(async () => {
      const inner = await withAdvisoryLock(tm, key, () => 'inner', { wait: 'try' });
      await g.at('inner-returned');
      return inner._unsafeUnwrap();
    });
    await g.reached('inner-returned');
    const meanwhile = await withAdvisoryLock(tm, key, () => 'x', { wait: 'try' });
    expect(meanwhile.isErr() && meanwhile.error.kind).toBe('LockBusy');
    g.open('inner-returned');
    expect((await outer)._unsafeUnwrap()).toBe('inner');
    expect((await withAdvisoryLock(tm, key, () => 'after', { wait: 'try' }))._unsafeUnwrap()).toBe('after');
  });

  it("inside an outer transaction, propagation 'nested' contains a lock timeout in a savepoint", async () => {
    const key = advisoryKey('test', 'nested-timeout');
    const g = gate();
    const holder = withAdvisoryLock(tm, key, async () => {
      await g.at('holding');
    });
    await g.reached('holding');
    const outer = await tm.do(async (tx) => {
      const inner = await withAdvisoryLock(tm, key, () => 'never', {
        lockTimeout: 50,
        tx: { propagation: 'nested' },
      });
      const kind = inner.isErr() ? inner.error.kind : 'ok';
      // the outer transaction is still usable after the savepoint rolled back
      const { rows } = await tx.query<{ n: number }>('SELECT 41 + 1 AS n');
      return { kind, n: rows[0]!.n };
    });
    expect(outer._unsafeUnwrap()).toEqual({ kind: 'LockNotAvailable', n: 42 });
    g.open('holding');
    await holder;
  });

  it('two-int32 keys lock too, in their own key space', async () => {
    const pair = advisoryKeyPair(30, 42)._unsafeUnwrap();
    const g = gate();
    const first = withAdvisoryLock(tm, pair, async () => {
      await g.at('holding');
    });
    await g.reached('holding');
    const busy = await withAdvisoryLock(tm, { namespace: 30, id: 42 }, () => 1, { wait: 'try' });
    expect(busy.isErr() && busy.error.kind === 'LockBusy' && busy.error.keys).toEqual(['30/42']);
    // hand-written SQL with the two-argument function sees the same lock
    const raw = await pool.query<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock(30, 42) AS ok');
    expect(raw.rows[0]!.ok).toBe(false);
    g.open('holding');
    await first;
  });

  it('invalid keys or options → InvalidOptions, nothing sent', async () => {
    let called = false;
    const noKeys = await withAdvisoryLock(tm, [], () => {
      called = true;
    });
    expect(noKeys.isErr() && noKeys.error.kind).toBe('InvalidOptions');
    const badKey = await withAdvisoryLock(tm, 2n ** 70n, () => {
      called = true;
    });
    expect(badKey.isErr() && badKey.error.kind).toBe('InvalidOptions');
    const badWait = await withAdvisoryLock(tm, 1n, () => (called = true), { wait: 'never' as 'try' });
    expect(badWait.isErr() && badWait.error.kind).toBe('InvalidOptions');
    const badTimeout = await withAdvisoryLock(tm, 1n, () => (called = true), { lockTimeout: -1 });
    expect(badTimeout.isErr() && badTimeout.error.kind).toBe('InvalidOptions');
    expect(called).toBe(false);
  });
});

describe('withAdvisoryLock: several keys', () => {
  it('the same keys in opposite orders never deadlock (sorted, one statement)', async () => {
    const a = advisoryKey('test', 'multi-a');
    const b = advisoryKey('test', 'multi-b');
    const c = advisoryKeyPair(7, 7)._unsafeUnwrap();
    const g = gate();
    const first = withAdvisoryLock(tm, [a, b, c], async () => {
      await g.at('holding');
      return 'ab';
    });
    await g.reached('holding');
    const second = withAdvisoryLock(tm, [c, b, a, b], () => 'ba', { tx: { maxAttempts: 1 } });
    await waitersOnAdvisory(1);
    g.open('holding');
    expect((await first)._unsafeUnwrap()).toBe('ab');
    expect((await second)._unsafeUnwrap()).toBe('ba');
    // and under free-running concurrency: 40 transactions in random orders, none fails
    const keys = [a, b, c];
    const runs = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        withAdvisoryLock(tm, i % 2 ? [...keys].reverse() : keys, () => i, { tx: { maxAttempts: 1 } }),
      ),
    );
    expect(runs.filter((r) => r.isErr())).toEqual([]);
  });

  it('naive control: taking the same two locks one statement at a time in opposite orders deadlocks', async () => {
    const a = advisoryKey('test', 'naive-a');
    const b = advisoryKey('test', 'naive-b');
    const c1 = await pool.connect();
    const c2 = await pool.connect();
    try {
      await c1.query('BEGIN');
      await c2.query('BEGIN');
      await c1.query('SELECT pg_advisory_xact_lock($1)', [a.toString()]);
      await c2.query('SELECT pg_advisory_xact_lock($1)', [b.toString()]);
      const p1 = c1.query('SELECT pg_advisory_xact_lock($1)', [b.toString()]).then(
        () => 'ok',
        (e: { code?: string }) => e.code,
      );
      const p2 = c2.query('SELECT pg_advisory_xact_lock($1)', [a.toString()]).then(
        () => 'ok',
        (e: { code?: string }) => e.code,
      );
      // one is the deadlock victim (its locks go at the error), the other then gets its lock
      expect((await Promise.all([p1, p2])).sort()).toEqual(['40P01', 'ok']);
    } finally {
      await c1.query('ROLLBACK');
      await c2.query('ROLLBACK');
      c1.release();
      c2.release();
    }
  });
});

describe('withAdvisoryLock: the lock dies with the connection', () => {
  it('released when the holder connection is dropped (FaultProxy.dropAll)', async () => {
    const proxy = await FaultProxy.start({ target: url });
    const proxied = new pg.Pool({ connectionString: proxy.url, max: 2 });
    proxied.on('error', () => {});
    const proxiedTm = new TxManager(proxied);
    const key = advisoryKey('test', 'dropped');
    const g = gate();
    try {
      const holder = proxiedTm.do(
        async (tx) => {
          const locked = await withAdvisoryLock(proxiedTm, key, () => 'locked', { wait: 'try' });
          if (locked.isErr()) return locked;
          if (tx.attempt === 1) await g.at('holding');
          await tx.query('SELECT 1');
          return tx.attempt;
        },
        { maxAttempts: 1 },
      );
      await g.reached('holding');
      expect((await withAdvisoryLock(tm, key, () => 1, { wait: 'try' })).isErr()).toBe(true);
      proxy.dropAll(); // the provider's proxy cuts the TCP connection while the lock is held
      expect(await eventuallyFree(key)).toBe(true);
      g.open('holding');
      const held = await holder;
      expect(held.isErr() && lastKind(held.error)).toBe('ConnectionLost');
    } finally {
      await proxied.end();
      await proxy.close();
    }
  });

  it('released when the holder backend is terminated (pg_terminate_backend)', async () => {
    const key = advisoryKey('test', 'terminated');
    const g = gate();
    let pid = 0;
    const holder = withAdvisoryLock(
      tm,
      key,
      async (tx) => {
        pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        await g.at('holding');
        await tx.query('SELECT 1');
      },
      { wait: 'try', tx: { maxAttempts: 1 } },
    );
    await g.reached('holding');
    expect((await withAdvisoryLock(tm, key, () => 1, { wait: 'try' })).isErr()).toBe(true);
    await pool.query('SELECT pg_terminate_backend($1)', [pid]);
    expect(await eventuallyFree(key)).toBe(true);
    g.open('holding');
    const held = await holder;
    expect(held.isErr() && lastKind(held.error)).toBe('ConnectionLost');
  });
});
