import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';
import { runBin } from './cli-support.js';

const { pool, url } = await useTestDatabase();
const TASKS = fileURLToPath(new URL('../fixtures/worker-tasks.mjs', import.meta.url));
const BROKEN = fileURLToPath(new URL('../fixtures/worker-tasks-broken.mjs', import.meta.url));
const NO_HANDLERS = fileURLToPath(new URL('../fixtures/worker-tasks-no-handlers.mjs', import.meta.url));
const queue = new Queue({
  pool,
  txManager: new TxManager(pool),
  schema: 'cli_worker_q',
  tasks: { greet: z.object({ name: z.string() }), hold: z.object({ key: z.number().int() }) },
});

/** `node bin/pg-txkit.js worker …` as a process: its JSON lines as they arrive, its pid, and its exit. */
function startWorker(argv: string[]) {
  let stdout = '';
  let stderr = '';
  let pid: number | undefined;
  const exited = runBin(['worker', ...argv], {
    timeoutMs: 120_000,
    onStdout: (text, p) => {
      stdout = text;
      pid = p;
    },
    onStderr: (text) => {
      stderr = text;
    },
  }).then((r) => r.code);
  const lines = () =>
    stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const signal = (name: NodeJS.Signals) => {
    if (pid === undefined) throw new Error('the worker has written nothing yet');
    process.kill(pid, name);
  };
  return { exited, lines, signal, stderr: () => stderr };
}

/** Enqueues a `hold` job on advisory lock `key` (held by the test) and waits until its handler waits for it. */
async function holdRunning(key: number) {
  const held = (await queue.enqueue(pool, 'hold', { key }))._unsafeUnwrap();
  await eventually(async () => {
    const r = await pool.query(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted",
      [key],
    );
    return r.rows[0].n === 1;
  });
  return held;
}

describe('pg-txkit worker (a process)', () => {
  it('runs the module handlers, logs JSON lines, and on SIGTERM lets a running handler finish, then exits 0', async () => {
    const w = startWorker(['--tasks', TASKS, '--url', url, '--concurrency', '2', '--json']);
    await eventually(() => w.lines().some((l) => l.event === 'started'), 30_000);
    expect(w.lines().find((l) => l.event === 'started')).toMatchObject({
      level: 'info',
      schema: 'cli_worker_q',
      tasks: ['greet', 'hold'],
      concurrency: 2,
    });
    (await queue.enqueueMany(pool, 'greet', [{ name: 'a' }, { name: 'b' }, { name: 'c' }]))._unsafeUnwrap();
    await eventually(
      () => w.lines().filter((l) => l.event === 'job' && l.outcome === 'completed').length === 3,
    );
    // A handler that waits for the test's lock is running when SIGTERM comes.
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(4242)');
      const held = await holdRunning(4242);
      w.signal('SIGTERM');
      await eventually(() => w.stderr().includes('stopping cleanly'));
      await holder.query('SELECT pg_advisory_unlock(4242)');
      expect(await w.exited).toBe(0);
      const ends = w.lines().filter((l) => l.event === 'job');
      expect(ends.find((l) => l.id === held.id)).toMatchObject({ task: 'hold', outcome: 'completed' });
      expect(w.lines().at(-1)).toMatchObject({ event: 'stopped', msg: 'worker stopped' });
      const left = await pool.query('SELECT count(*)::int AS n FROM cli_worker_q.jobs');
      expect(left.rows[0].n).toBe(0);
    } finally {
      await holder.end();
    }
  });

  it('on SIGTERM, a handler that ignores its abort signal past --grace is left running with its job leased, and the process exits anyway', {
    timeout: 60_000,
  }, async () => {
    const w = startWorker(['--tasks', TASKS, '--url', url, '--grace', '100', '--json']);
    await eventually(() => w.lines().some((l) => l.event === 'started'), 30_000);
    // The handler waits for the test's lock inside its transaction (a pool client, a socket) and never
    // looks at its signal: a third-party call that takes none.
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(4243)');
      const held = await holdRunning(4243);
      w.signal('SIGTERM');
      // The process exits while the handler still waits (it used to stay up as long as the handler ran).
      expect(await w.exited).toBe(0);
      const lines = w.lines();
      expect(lines.find((l) => l.event === 'job' && l.id === held.id)).toMatchObject({
        outcome: 'unsettled',
      });
      const warned = lines.filter((l) => l.level === 'warn');
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatchObject({ jobIds: [held.id] });
      expect(lines.at(-1)).toMatchObject({ event: 'stopped', counters: { unsettled: 1, released: 0 } });
      // Not given back while its handler ran: still leased, for the reaper once the lease lapses.
      const job = await pool.query('SELECT state FROM cli_worker_q.jobs WHERE id = $1', [held.id]);
      expect(job.rows).toEqual([{ state: 'running' }]);
      await pool.query('DELETE FROM cli_worker_q.jobs WHERE id = $1', [held.id]);
    } finally {
      await holder.end();
    }
  });

  it.each([
    [['--tasks', '/nonexistent/tasks.mjs'], 2, /cannot load --tasks/],
    [['--tasks', BROKEN], 2, /handlers\.other has no schema in 'tasks'/],
    [['--tasks', NO_HANDLERS], 2, /export 'handlers' \(task name → async function\) is missing or empty/],
    [['--tasks', TASKS, '--concurrency', '0'], 2, /expected an integer from 1 to 1000/],
  ])('%j → exit %i before connecting, one line', async (argv, code, message) => {
    const r = await runBin(['worker', ...(argv as string[]), '--url', url]);
    expect(r.code).toBe(code);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('an unreachable server: exit 3, one line', async () => {
    const r = await runBin(['worker', '--tasks', TASKS, '--url', 'postgres://x:y@127.0.0.1:1/db']);
    expect(r.code).toBe(3);
    // The queue's own log line of the failed migrate, then the command's one-line error.
    expect(r.stderr.trim().split('\n').at(-1)).toMatch(
      /^pg-txkit: error: cannot connect to postgres:\/\/x:\*\*\*@127\.0\.0\.1:1\/db/,
    );
    expect(r.stderr).not.toMatch(/\s+at .*\.js:\d+/);
  });
});
