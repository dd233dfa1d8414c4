import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { isConnectionError } from '../../src/errors/index.js';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';

// This file starts its own embedded server (not the run's shared one): it restarts and stops it.
const server: StartedPostgres = await startPostgres({ provider: 'embedded' });
afterAll(() => server.stop());

describe('startPostgres (embedded)', () => {
  it('starts a real PostgreSQL 18 on a free port', async () => {
    expect(server.provider).toBe('embedded');
    expect(server.version).toMatch(/^18\./);
    const port = Number(new URL(server.url).port);
    expect(port).toBeGreaterThan(0);
  });

  it('restart() really restarts the server; a pool reconnects and sees the data', async () => {
    const pool = new pg.Pool({ connectionString: server.url, max: 2 });
    pool.on('error', () => {}); // idle clients are cut by the restart
    try {
      await pool.query('CREATE TABLE survives (id int PRIMARY KEY, note text)');
      await pool.query("INSERT INTO survives VALUES (1, 'before restart')");
      const before = await pool.query<{ t: Date }>('SELECT pg_postmaster_start_time() AS t');

      // a connection held across the restart is cut
      const held = await pool.connect();
      let heldError: unknown;
      held.on('error', (e) => {
        heldError = e;
      });
      await server.restart();
      const failure = await held.query('SELECT 1').then(
        () => undefined,
        (e: unknown) => e,
      );
      held.release(true);
      expect(isConnectionError(failure ?? heldError)).toBe(true);

      // the pool replaces dead clients: a bounded number of attempts until a fresh connection answers
      let rows: { id: number; note: string }[] | undefined;
      for (let attempt = 0; attempt < 5 && !rows; attempt++) {
        rows = await pool
          .query<{ id: number; note: string }>('SELECT id, note FROM survives')
          .then((r) => r.rows)
          .catch(() => undefined);
      }
      expect(rows).toEqual([{ id: 1, note: 'before restart' }]);
      const after = await pool.query<{ t: Date }>('SELECT pg_postmaster_start_time() AS t');
      expect(after.rows[0]?.t.getTime()).toBeGreaterThan(
        before.rows[0]?.t.getTime() ?? Number.POSITIVE_INFINITY,
      );
    } finally {
      await pool.end();
    }
  });

  it('stop() shuts the server down and is idempotent', async () => {
    const other = await startPostgres({ provider: 'embedded' });
    const client = new pg.Client(other.url);
    await client.connect();
    await client.end();
    await other.stop();
    await other.stop();
    const late = new pg.Client({ connectionString: other.url, connectionTimeoutMillis: 2000 });
    late.on('error', () => {});
    await expect(late.connect()).rejects.toSatisfy(isConnectionError);
  });

  it('a url provider refuses restart() with a clear error', async () => {
    const byUrl = await startPostgres({ provider: 'url', url: server.url });
    expect(byUrl.provider).toBe('url');
    await expect(byUrl.restart()).rejects.toThrow(/restart\(\) is not possible/);
    await byUrl.stop();
  });
});
