import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classify } from '../../src/errors/index.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';
import type { StartedStandby } from '../../src/testing/start-standby.js';
import { TxManager } from '../../src/tx/tx-manager.js';

// This file starts its own primary and a streaming hot standby of it (startStandby): reads routed to
// the replica, read-your-writes, and writes that reach a read-only server (25006).
const primary: StartedPostgres = await startPostgres({ provider: 'embedded' });
const standby: StartedStandby = await primary.startStandby();
const pools: pg.Pool[] = [];
const proxies: FaultProxy[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await Promise.all(proxies.map((p) => p.close()));
  await standby.stop();
  await primary.stop();
});

function newPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pools.push(pool);
  return pool;
}

beforeAll(async () => {
  const admin = newPool(primary.url, 1);
  await admin.query('CREATE TABLE events (id serial PRIMARY KEY, body text NOT NULL)');
  await standby.caughtUp();
});

describe('a write that reaches a read-only server (25006)', () => {
  it('is retried on a FRESH connection until one reaches a writable primary', async () => {
    const proxy = await FaultProxy.start({ target: standby.url });
    proxies.push(proxy);
    // One client only: a retry that reused the client of the refused attempt would reach the standby again.
    const pool = newPool(proxy.url, 1);
    const retried: string[] = [];
    const tm = new TxManager(pool, {
      hooks: {
        onRetry: ({ error }) => {
          retried.push(error.kind);
          // The name now resolves to the primary (a DNS answer that was stale, then fixed).
          if (retried.length === 2) proxy.retarget(primary.url);
        },
      },
    });
    const seen: { pid: number; recovering: boolean }[] = [];
    const result = await tm.do(
      async (tx) => {
        const { rows } = await tx.query<{ pid: number; recovering: boolean }>(
          'SELECT pg_backend_pid() AS pid, pg_is_in_recovery() AS recovering',
        );
        if (rows[0]) seen.push(rows[0]);
        await tx.query('INSERT INTO events (body) VALUES ($1)', ['stale-dns']);
        return 'written';
      },
      { backoff: { baseMs: 1, capMs: 5 } },
    );
    expect(result._unsafeUnwrap()).toBe('written');
    expect(retried).toEqual(['ReadOnlyTransaction', 'ReadOnlyTransaction']);
    expect(seen.map((s) => s.recovering)).toEqual([true, true, false]);
    expect(new Set(seen.map((s) => s.pid)).size).toBe(3);
    const { rows } = await newPool(primary.url, 1).query(
      "SELECT count(*)::int AS n FROM events WHERE body = 'stale-dns'",
    );
    expect(rows[0]?.n).toBe(1);
  });

  it('is not retried when the transaction itself is readOnly (the write is the bug)', async () => {
    const tm = new TxManager(newPool(primary.url, 1));
    let attempts = 0;
    const result = await tm.do(
      async (tx) => {
        attempts++;
        await tx.query('INSERT INTO events (body) VALUES ($1)', ['read-only tx']);
      },
      { readOnly: true },
    );
    expect(result._unsafeUnwrapErr().kind).toBe('ReadOnlyTransaction');
    expect(attempts).toBe(1);
  });
});

/** What a read saw and where it ran. */
async function readEvents(tx: { query: pg.Pool['query'] }, body: string) {
  const { rows } = await tx.query<{ n: number; standby: boolean }>(
    'SELECT count(*)::int AS n, pg_is_in_recovery() AS standby FROM events WHERE body = $1',
    [body],
  );
  return rows[0];
}

/** A request: starts in an async context of its own (like a handler called for a new socket event). */
async function request<T>(fn: () => Promise<T>): Promise<T> {
  await null;
  return fn();
}

describe('readOnly transactions on a replica', () => {
  it('routes readOnly to the replica, read-write and serializable readOnly to the primary', async () => {
    const tm = new TxManager(newPool(primary.url), { replica: newPool(standby.url) });
    const where = (tx: { query: pg.Pool['query'] }) =>
      tx.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby').then((r) => r.rows[0]?.standby);
    expect(await tm.doOrThrow(where, { readOnly: true })).toBe(true);
    expect(await tm.doOrThrow(where, { readOnly: true, isolation: 'repeatable read' })).toBe(true);
    expect(await tm.doOrThrow(where)).toBe(false);
    // A hot standby refuses serializable (0A000): the manager keeps that guarantee on the primary.
    expect(await tm.doOrThrow(where, { readOnly: true, isolation: 'serializable', deferrable: true })).toBe(
      false,
    );
    expect(tm.replica).toBeDefined();
  });

  it('lag made visible: with replay paused, another request misses a write that its writer reads back', async () => {
    const tm = new TxManager(newPool(primary.url), { replica: newPool(standby.url) });
    await standby.pauseReplay();
    let writerRead: Awaited<ReturnType<typeof readEvents>>;
    let otherRead: Awaited<ReturnType<typeof readEvents>>;
    let lagBytes = 0;
    try {
      writerRead = await request(async () => {
        await tm.doOrThrow((tx) => tx.query('INSERT INTO events (body) VALUES ($1)', ['ryw']));
        return tm.doOrThrow((tx) => readEvents(tx, 'ryw'), { readOnly: true });
      });
      otherRead = await request(() => tm.doOrThrow((tx) => readEvents(tx, 'ryw'), { readOnly: true }));
      lagBytes = (await standby.lag()).bytes;
    } finally {
      await standby.resumeReplay();
    }
    expect(lagBytes).toBeGreaterThan(0);
    // The writer's own read went to the primary (the replica had not replayed its commit) and saw it …
    expect(writerRead).toEqual({ n: 1, standby: false });
    // … another request read the paused replica: the write is not there yet.
    expect(otherRead).toEqual({ n: 0, standby: true });
    await standby.caughtUp();
    expect(await request(() => tm.doOrThrow((tx) => readEvents(tx, 'ryw'), { readOnly: true }))).toEqual({
      n: 1,
      standby: true,
    });
  });

  it('once the replica has replayed the commit, the writer reads the replica again', async () => {
    const tm = new TxManager(newPool(primary.url), { replica: newPool(standby.url) });
    const reads = await request(async () => {
      await tm.doOrThrow((tx) => tx.query('INSERT INTO events (body) VALUES ($1)', ['replayed']));
      await standby.caughtUp();
      return [
        await tm.doOrThrow((tx) => readEvents(tx, 'replayed'), { readOnly: true }),
        await tm.doOrThrow((tx) => readEvents(tx, 'replayed'), { readOnly: true }),
      ];
    });
    expect(reads).toEqual([
      { n: 1, standby: true },
      { n: 1, standby: true },
    ]);
  });

  it('readYourWrites: false reads the replica right after a write (the naive routing misses it)', async () => {
    const tm = new TxManager(newPool(primary.url), { replica: newPool(standby.url), readYourWrites: false });
    await standby.pauseReplay();
    let read: Awaited<ReturnType<typeof readEvents>>;
    try {
      read = await request(async () => {
        await tm.doOrThrow((tx) => tx.query('INSERT INTO events (body) VALUES ($1)', ['naive']));
        return tm.doOrThrow((tx) => readEvents(tx, 'naive'), { readOnly: true });
      });
    } finally {
      await standby.resumeReplay();
    }
    expect(read).toEqual({ n: 0, standby: true });
  });

  it('refuses a replica that is not a pool, and a bad window, before any SQL', () => {
    const pool = newPool(primary.url);
    expect(() => new TxManager(pool, { replica: {} as pg.Pool })).toThrow(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
    expect(() => new TxManager(pool, { replica: pool, readYourWrites: 'soon' })).toThrow(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
  });
});

describe('a replica that cannot be reached', () => {
  it('sends readOnly transactions to the primary instead of failing them', async () => {
    const proxy = await FaultProxy.start({ target: standby.url });
    proxies.push(proxy);
    const replicaPool = newPool(proxy.url, 2);
    const tm = new TxManager(newPool(primary.url), { replica: replicaPool });
    const where = (tx: { query: pg.Pool['query'] }) =>
      tx.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby').then((r) => r.rows[0]?.standby);
    expect(await tm.doOrThrow(where, { readOnly: true })).toBe(true);
    await proxy.close(); // the replica's address now refuses connections
    await replicaPool.query('SELECT 1').catch(() => {}); // (its idle client is gone too)
    expect(await tm.doOrThrow(where, { readOnly: true })).toBe(false);
  });

  it('a replica that stops answering (packets dropped, not refused): its idle client is given up after the bound and the primary serves the read', async () => {
    const proxy = await FaultProxy.start({ target: standby.url });
    proxies.push(proxy);
    // No connectionTimeoutMillis on this pool: the manager's own bound applies.
    const replicaPool = newPool(proxy.url, 1);
    const tm = new TxManager(newPool(primary.url), { replica: replicaPool });
    const where = (tx: { query: pg.Pool['query'] }) =>
      tx.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby').then((r) => r.rows[0]?.standby);
    expect(await tm.doOrThrow(where, { readOnly: true })).toBe(true); // the replica's client is now idle
    proxy.stall();
    let ran = 0;
    const read = await tm.doOrThrow(
      (tx) => {
        ran++;
        return where(tx);
      },
      { readOnly: true },
    );
    expect(read).toBe(false);
    expect(ran).toBe(1); // the callback never started on the replica: it ran once, on the primary
    // The next read does not try the silent replica again: it goes straight to the primary.
    const connectionsBefore = proxy.connections;
    expect(await tm.doOrThrow(where, { readOnly: true })).toBe(false);
    expect(proxy.connections).toBeLessThanOrEqual(connectionsBefore);
    proxy.resume();
  });

  it('a replica whose new connections are never answered: the acquire is bounded and the read goes to the primary', async () => {
    const proxy = await FaultProxy.start({ target: standby.url });
    proxies.push(proxy);
    proxy.stall(); // TCP connects to the proxy; the startup message is never answered
    // Neither this pool nor the call bounds the wait beyond the call's acquireTimeout.
    const tm = new TxManager(newPool(primary.url), { replica: newPool(proxy.url, 2) });
    const where = (tx: { query: pg.Pool['query'] }) =>
      tx.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby').then((r) => r.rows[0]?.standby);
    const read = await tm.do(where, { readOnly: true, acquireTimeout: 300 });
    expect(read._unsafeUnwrap()).toBe(false);
    proxy.resume();
  });
});

describe('a serializable BEGIN refused by a hot standby (0A000), sent with the first statement', () => {
  it('the statement behind it never runs, and the failure is the one BEGIN alone gives', async () => {
    // A pool pointed straight at the standby (a stale address): BEGIN ISOLATION LEVEL SERIALIZABLE is
    // refused there. The statement behind it changes the session (a setting kept past the statement):
    // had it run in autocommit, the session would show it afterwards.
    const direct = newPool(standby.url, 1);
    const alone = await direct.query('BEGIN ISOLATION LEVEL SERIALIZABLE').then(
      () => undefined,
      (error: unknown) => classify(error),
    );
    await direct.query('ROLLBACK').catch(() => {});
    expect(alone?.kind).toBeDefined();
    const tm = new TxManager(direct);
    let ran = 0;
    const result = await tm.do(
      async (tx) => {
        ran++;
        await tx.query("SELECT set_config('application_name', $1, false)", ['ran-outside-its-transaction']);
        return 'read';
      },
      { isolation: 'serializable', maxAttempts: 1 },
    );
    expect(result._unsafeUnwrapErr().kind).toBe(alone?.kind);
    expect((result._unsafeUnwrapErr() as { code?: string }).code).toBe('0A000');
    expect(ran).toBe(1);
    const { rows } = await direct.query<{ name: string }>('SHOW application_name');
    expect(rows[0]?.name).not.toBe('ran-outside-its-transaction');
    const seen = await newPool(standby.url, 1).query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'ran-outside-its-transaction'",
    );
    expect(seen.rows[0]?.n).toBe(0);
  });
});
