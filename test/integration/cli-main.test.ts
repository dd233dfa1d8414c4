import { beforeAll, describe, expect, it } from 'vitest';
import { Schedule } from '../../src/testing/schedule.js';
import { useTestDatabase } from '../helpers.js';
import { runBin, runMain } from './cli-support.js';
import { client, pidOf, waitUntilBlocked } from './diagnostics-support.js';

const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query('CREATE TABLE orders (id int PRIMARY KEY, total int)');
  await pool.query('INSERT INTO orders VALUES (1, 10), (2, 20)');
});

/** Stages the lock-queue cascade, runs `check`, then releases everything. */
async function withCascade(
  check: (pids: { holder: number; alter: number; readers: number[] }) => Promise<void>,
) {
  const holder = await client(url, 'long-transaction');
  const s = await Schedule.open(url, {
    sessions: ['alter', 'r1', 'r2'],
    blockTimeoutMs: 30_000,
    blockers: 'any',
  });
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT count(*) FROM orders');
    const running = s.run([
      ['alter', 'alter table orders add column if not exists note text'],
      ['r1', 'select count(*) from orders'],
      ['r2', 'select count(*) from orders'],
    ]);
    const pids = { holder: await pidOf(holder), alter: s.pid('alter'), readers: [s.pid('r1'), s.pid('r2')] };
    await waitUntilBlocked(pool, [pids.alter, ...pids.readers]);
    try {
      await check(pids);
    } finally {
      await holder.query('COMMIT');
      await running;
    }
  } finally {
    await s.close();
    await holder.end();
  }
}

describe('pg-txkit doctor (in-process main)', () => {
  it('--json reports the cascade: the waiting ALTER as root cause, the long transaction as root blocker', async () => {
    await withCascade(async (pids) => {
      const r = await runMain(['doctor', '--json', '--url', url]);
      expect(r.code).toBe(1); // findings
      const report = JSON.parse(r.stdout);
      expect(report.cascades[0].rootCause.pid).toBe(pids.alter);
      expect(report.cascades[0].waitsFor).toEqual([pids.holder]);
      expect(report.forest[0].session.pid).toBe(pids.holder);
      expect(report.suggestions[0]).toMatchObject({ pid: pids.alter, action: 'cancel' });
    });
  });

  it('prints an indented tree with the root cause and the SQL to cancel it', async () => {
    await withCascade(async (pids) => {
      const r = await runMain(['doctor', '--url', url, '--redact']);
      expect(r.code).toBe(1);
      expect(r.stdout).toContain('Lock-queue cascades (root cause)');
      expect(r.stdout).toContain(
        `pid ${pids.alter} waits for AccessExclusiveLock on orders (held by pid ${pids.holder})`,
      );
      expect(r.stdout).toMatch(
        new RegExp(`pid ${pids.holder} \\[idle in transaction.*root blocker, 3 blocked`),
      );
      expect(r.stdout).toMatch(new RegExp(`└─ pid ${pids.alter} waits`));
      expect(r.stdout).toContain(`SELECT pg_cancel_backend(${pids.alter});`);
      expect(r.stdout).not.toContain('\x1b['); // no colors off a TTY
    });
  });

  it('exits 0 on a quiet database and takes DATABASE_URL when --url is absent', async () => {
    const r = await runMain(['doctor'], { env: { DATABASE_URL: url } });
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('OK: no blocking');
    expect(r.code).toBe(0);
  });

  it('--watch refreshes until interrupted, then exits 130', async () => {
    const controller = new AbortController();
    let reports = 0;
    const r = await runMain(['doctor', '--watch', '1', '--json', '--url', url], {
      signal: controller.signal,
      onStdout: () => {
        reports++;
        if (reports === 2) controller.abort();
      },
    });
    expect(reports).toBe(2);
    expect(r.code).toBe(130);
  });
});

describe('pg-txkit bad arguments (in-process main)', () => {
  it.each([
    [['nope'], 2, /unknown command 'nope'/],
    [['doctor', '--url', 'not a url'], 2, /invalid --url/],
    [['doctor', '--url', 'mysql://x@localhost/db'], 2, /protocol must be postgres/],
    [['doctor', '--bogus'], 2, /unknown option '--bogus'/],
    [['demo', '--clients', '0'], 2, /--clients/],
    [['demo', '--scale', 'big'], 2, /--scale/],
    [
      ['demo', '--only', 'no-such-scenario'],
      2,
      /unknown scenario id\(s\) no-such-scenario; available: .*lock-queue-cascade/,
    ],
    [
      ['doctor', '--url', 'postgres://nobody:pw@127.0.0.1:1/db'],
      3,
      /cannot connect to postgres:\/\/nobody:\*\*\*@127\.0\.0\.1:1\/db/,
    ],
    [['doctor'], 2, /no server given/],
  ])('%j → exit %i with one line on stderr', async (argv, code, message) => {
    const r = await runMain(argv as string[]);
    expect(r.code).toBe(code);
    expect(r.stderr).toMatch(message as RegExp);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe('');
  });

  it('--help works for every command and exits 0', async () => {
    for (const argv of [['--help'], ['doctor', '--help'], ['demo', '--help']]) {
      const r = await runMain(argv);
      expect(r.code, argv.join(' ')).toBe(0);
      expect(r.stdout).toContain('Usage: pg-txkit');
    }
  });

  it('help shows durations as they are written, and speaks to the user, not to our tests', async () => {
    const doctor = (await runMain(['doctor', '--help'])).stdout.replace(/\s+/g, ' ');
    expect(doctor).toContain('idle-in-transaction threshold (default: 30s)');
    expect(doctor).toContain('long lock wait threshold (default: 5s)');
    expect(doctor).toContain('is a finding (default: 5min)');
    expect(doctor).not.toMatch(/default: \d{4,}\)/); // no raw milliseconds
    expect(doctor).toContain('--no-queues');
    const demo = (await runMain(['demo', '--help'])).stdout.replace(/\s+/g, ' ');
    expect(demo).not.toMatch(/tests? use/);
    expect(demo).toContain('1 = the full run');
  });

  it('lists only commands that work from an installed package (the benchmarks are a repository script)', async () => {
    const help = await runMain(['--help']);
    expect(help.stdout).toMatch(/\bdoctor\b/);
    expect(help.stdout).not.toMatch(/\bbench\b/);
    const bench = await runMain(['bench']);
    expect(bench.code).toBe(2);
    expect(bench.stderr).toMatch(/unknown command 'bench'/);
  });
});

describe('node bin/pg-txkit.js (child process)', () => {
  it('doctor --json --url against a staged cascade names the root blocker', async () => {
    await withCascade(async (pids) => {
      const r = await runBin(['doctor', '--json', '--url', url]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(1);
      const report = JSON.parse(r.stdout);
      expect(report.forest[0].session.pid).toBe(pids.holder);
      expect(report.cascades[0].rootCause.pid).toBe(pids.alter);
    });
  });

  it.each([
    [['frobnicate'], 2],
    [['doctor', '--url', '::bad::'], 2],
    [['doctor', '--url', 'postgres://x:y@127.0.0.1:1/db'], 3],
  ])('%j → one-line error, exit %i, no stack trace', async (argv, code) => {
    const r = await runBin(argv as string[]);
    expect(r.code).toBe(code);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^pg-txkit: error: /);
    expect(r.stderr).not.toMatch(/\s+at .*\.js:\d+/);
  });
});
