import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { classify } from '../../src/errors/index.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
await pool.query('CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL)');
await pool.query('INSERT INTO acct VALUES (1, 100)');

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function startProxy(): Promise<FaultProxy> {
  const proxy = await FaultProxy.start({ target: url });
  cleanups.push(() => proxy.close());
  return proxy;
}

async function connect(connectionString: string, name: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString, application_name: name });
  const errors: unknown[] = [];
  client.on('error', (e) => errors.push(e));
  await client.connect();
  cleanups.push(() => client.end().catch(() => {}));
  return client;
}

/** Polls (bounded) until no backend with this application_name is left. */
async function backendGone(name: string): Promise<boolean> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await pool.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
      [name],
    );
    if (rows[0].n === 0) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
}

describe('FaultProxy', () => {
  it('rewrites the target URL to point at itself and forwards queries', async () => {
    const proxy = await startProxy();
    expect(new URL(proxy.url).port).toBe(String(proxy.port));
    expect(new URL(proxy.url).pathname).toBe(new URL(url).pathname);
    const client = await connect(proxy.url, 'fp-forward');
    expect(proxy.connections).toBe(1);
    const { rows } = await client.query('SELECT balance FROM acct WHERE id = 1');
    expect(rows).toEqual([{ balance: 100 }]);
  });

  it('dropAll fails an in-flight query with a connection error and the server rolls the transaction back', async () => {
    const proxy = await startProxy();
    const client = await connect(proxy.url, 'fp-drop');
    await client.query('BEGIN');
    await client.query('UPDATE acct SET balance = 0 WHERE id = 1');
    // the backend checks the socket while it runs, so it notices the reset without waiting for pg_sleep
    await client.query("SET LOCAL client_connection_check_interval = '50ms'");
    const inFlight = client.query('SELECT pg_sleep(60)').then(
      () => undefined,
      (e: unknown) => e,
    );
    // the query is running on the server (not just sent)
    for (let i = 0; i < 200; i++) {
      const { rows } = await pool.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'fp-drop' AND query LIKE 'SELECT pg_sleep%' AND state = 'active'",
      );
      if (rows[0].n === 1) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(proxy.dropAll()).toBe(1);
    const error = await inFlight;
    expect(classify(error)?.kind).toBe('ConnectionLost');
    expect(proxy.connections).toBe(0);

    expect(await backendGone('fp-drop')).toBe(true);
    const { rows } = await pool.query('SELECT balance FROM acct WHERE id = 1');
    expect(rows).toEqual([{ balance: 100 }]);
    const locks = await pool.query(
      "SELECT count(*)::int AS n FROM pg_locks WHERE relation = 'acct'::regclass AND pid <> pg_backend_pid()",
    );
    expect(locks.rows[0].n).toBe(0);
    // the row can be locked at once: nobody holds it
    const direct = await pool.connect();
    try {
      await direct.query('BEGIN');
      await expect(direct.query('SELECT id FROM acct WHERE id = 1 FOR UPDATE NOWAIT')).resolves.toMatchObject(
        {
          rowCount: 1,
        },
      );
      await direct.query('ROLLBACK');
    } finally {
      direct.release();
    }
  });

  it('dropAll still accepts new connections afterwards (a pool reconnects)', async () => {
    const proxy = await startProxy();
    const proxied = new pg.Pool({ connectionString: proxy.url, max: 2 });
    proxied.on('error', () => {});
    cleanups.push(() => proxied.end());
    await proxied.query('SELECT 1');
    proxy.dropAll();
    // the idle client was reset; the pool drops it and opens a new one through the proxy
    let result: pg.QueryResult | undefined;
    for (let i = 0; i < 5 && !result; i++) {
      result = await proxied.query('SELECT 2 AS two').catch(() => undefined);
    }
    expect(result?.rows).toEqual([{ two: 2 }]);
  });

  it('stall makes a query hang until resume, then it completes', async () => {
    const proxy = await startProxy();
    const client = await connect(proxy.url, 'fp-stall');
    proxy.stall();
    let settled = false;
    const pending = client.query('SELECT 41 + 1 AS answer').finally(() => {
      settled = true;
    });
    // the query cannot reach the server: it is not running there, and the client has no answer
    for (let i = 0; i < 5; i++) {
      const { rows } = await pool.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'fp-stall' AND state = 'active'",
      );
      expect(rows[0].n).toBe(0);
    }
    expect(settled).toBe(false);
    expect(proxy.stalled).toBe(true);
    proxy.resume();
    await expect(pending).resolves.toMatchObject({ rows: [{ answer: 42 }] });
  });

  it('latency delays traffic in both directions and keeps byte order', async () => {
    const proxy = await startProxy();
    const client = await connect(proxy.url, 'fp-latency');
    proxy.latency(100);
    // a lower bound only (noise can make it slower, never faster): a round trip crosses the proxy twice
    const started = performance.now();
    await client.query('SELECT 1');
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    proxy.latency(20);
    // a large answer crosses the proxy in many chunks: it must arrive complete and in order
    const { rows } = await client.query(
      'SELECT i, repeat(chr(97 + i % 26), 1000) AS pad FROM generate_series(1, 2000) AS i ORDER BY i',
    );
    expect(rows.length).toBe(2000);
    expect(
      rows.every((r, k) => r.i === k + 1 && r.pad === String.fromCharCode(97 + ((k + 1) % 26)).repeat(1000)),
    ).toBe(true);
    // and a large request too (client → server)
    const big = 'y'.repeat(1_000_000);
    const echo = await client.query(
      'SELECT length($1::text) AS n, md5($1::text) = md5(repeat($2, 1000000)) AS same',
      [big, 'y'],
    );
    expect(echo.rows).toEqual([{ n: 1_000_000, same: true }]);
    proxy.latency(0);
    await expect(client.query('SELECT 1 AS one')).resolves.toMatchObject({ rows: [{ one: 1 }] });
    expect(() => proxy.latency(-1)).toThrow(RangeError);
  });

  it('retarget sends new connections to the new target and leaves open ones where they are', async () => {
    const proxy = await startProxy();
    const other = await startProxy(); // stands for another server: it counts what reaches it
    const before = await connect(proxy.url, 'retarget-before');
    proxy.retarget({ host: '127.0.0.1', port: other.port });
    expect(other.connections).toBe(0);
    const after = await connect(proxy.url, 'retarget-after');
    expect(other.connections).toBe(1);
    await expect(before.query('SELECT 1 AS one')).resolves.toMatchObject({ rows: [{ one: 1 }] });
    await expect(after.query('SELECT 2 AS two')).resolves.toMatchObject({ rows: [{ two: 2 }] });
    expect(() => proxy.retarget('not a url')).toThrow(expect.objectContaining({ kind: 'InvalidOptions' }));
    // @ts-expect-error port is required
    expect(() => proxy.retarget({ host: 'x' })).toThrow(expect.objectContaining({ kind: 'InvalidOptions' }));
  });

  it('rejects a bad target before listening', async () => {
    await expect(FaultProxy.start({ target: 'not a url' })).rejects.toMatchObject({ kind: 'InvalidOptions' });
    // @ts-expect-error port is required
    await expect(FaultProxy.start({ target: { host: 'x' } })).rejects.toMatchObject({
      kind: 'InvalidOptions',
    });
  });
});
