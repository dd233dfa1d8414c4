import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
