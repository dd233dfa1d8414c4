import net from 'node:net';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod/v4';
import { Queue, TxManager } from '../../src/index.js';
import { FaultProxy, gate } from '../../src/testing/index.js';
import { eventually } from '../fixtures/queue-helpers.js';
import { recordingLogger } from '../fixtures/recording-logger.js';
import { useTestDatabase } from '../helpers.js';

/** A port nobody listens on: bound, then closed again. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return address.port;
}

describe('a worker pointed at an unreachable database', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('logs its connection errors to the given logger instead of swallowing them', async () => {
    const port = await closedPort();
    // The README's setup: a plain pool, no pool.on('error').
    const pool = new pg.Pool({ host: '127.0.0.1', port, user: 'nobody', database: 'none' });
    const { lines, logger } = recordingLogger();
    const tm = new TxManager(pool);
    const queue = new Queue({ pool, txManager: tm, tasks: { email: z.object({ to: z.string() }) }, logger });
    const worker = queue.work({ email: async () => {} }, { pollInterval: 20 });
    try {
      await eventually(() => lines.some((l) => l.level === 'error' && l.obj.phase === 'claim'));
      const first = lines.find((l) => l.level === 'error' && l.obj.phase === 'claim');
      expect(first?.obj.phase).toBe('claim');
      expect(String(first?.msg)).toMatch(/claim/);
      expect(first?.obj.err).toBeDefined();
    } finally {
      await worker.stop();
      await pool.end();
    }
  });

  it('without a logger writes to console.error, rate-limited, never silently', async () => {
    const port = await closedPort();
    const pool = new pg.Pool({ host: '127.0.0.1', port, user: 'nobody', database: 'none' });
    const written: unknown[][] = [];
    vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
      written.push(args);
    });
    const tm = new TxManager(pool);
    const queue = new Queue({ pool, txManager: tm, tasks: { email: z.object({ to: z.string() }) } });
    const worker = queue.work({ email: async () => {} }, { pollInterval: 20 });
    try {
      await eventually(() => worker.counters.errors >= 5);
      expect(written.length).toBeGreaterThanOrEqual(1);
      // Rate-limited: five failed claims, one line (the next one a minute later at the earliest).
      expect(written.length).toBeLessThan(worker.counters.errors);
      const claimLines = written.filter((w) => /pg-txkit queue worker: claim failed/.test(String(w[0])));
      expect(claimLines).toHaveLength(1);
      expect(String(claimLines[0]?.[0])).toMatch(/ECONNREFUSED/);
    } finally {
      await worker.stop();
      await pool.end();
    }
  });
});

describe('a worker on a live database, with a logger', async () => {
  const { pool, url } = await useTestDatabase();

  it('logs a lost LISTEN connection at error and its return at info', async () => {
    const { lines, logger } = recordingLogger();
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'log_q',
      tasks: { t: z.object({}) },
      logger,
    });
    (await queue.migrate())._unsafeUnwrap();
    const worker = queue.work({ t: async () => {} }, { pollInterval: 50 });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await eventually(() => worker.listening);
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`,
      );
      await eventually(() =>
        lines.some((l) => l.level === 'info' && /LISTEN connection back/.test(String(l.msg))),
      );
      const lost = lines.find((l) => l.obj.phase === 'listen' && l.level === 'error');
      expect(lost?.msg).toMatch(/listen failed/);
    } finally {
      await admin.end();
      await worker.stop();
    }
  });

  it('a schedule stored by a newer version: one error line for the streak, then debug lines', async () => {
    const { lines, logger } = recordingLogger();
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'log_q3',
      tasks: { t: z.object({}) },
      schedules: { nightly: { cron: '0 3 * * *', task: 't' } },
      logger,
    });
    (await queue.migrate())._unsafeUnwrap();
    // A newer deploy (a replica still live) declares 'nightly' with a definition this version cannot read.
    await pool.query(
      `INSERT INTO log_q3.schedule_declarations (name, hash, definition, first_declared_at, last_declared_at)
       VALUES ('nightly', 'newer', '{"task": "t", "missed": "every-other"}', now() + interval '1 hour', now() + interval '1 hour')`,
    );
    const worker = queue.work({ t: async () => {} }, { listen: false, scheduleLiveness: '3s' });
    try {
      // Declaring passes every second: each finds it unreadable.
      await eventually(() => lines.filter((l) => l.obj.phase === 'schedule').length >= 3, 15_000);
      const of = lines.filter((l) => l.obj.phase === 'schedule');
      expect(of.filter((l) => l.level === 'error')).toHaveLength(1);
      expect(of[0]?.msg).toMatch(/schedules stored by a newer version, not fired here: nightly/);
      expect(of.slice(1).every((l) => l.level === 'debug')).toBe(true);
    } finally {
      await worker.stop();
    }
  });

  it('logs a handler past its timeout at warn', async () => {
    const { lines, logger } = recordingLogger();
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'log_q2',
      tasks: { t: z.object({}) },
      logger,
    });
    (await queue.migrate())._unsafeUnwrap();
    const job = (await queue.enqueue(pool, 't', {}))._unsafeUnwrap();
    const worker = queue.work(
      {
        t: (_job, ctx) =>
          new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve())),
      },
      { handlerTimeout: 50, listen: false },
    );
    try {
      await eventually(() => lines.some((l) => l.level === 'warn'));
      const warn = lines.find((l) => l.level === 'warn');
      expect(warn?.msg).toMatch(new RegExp(`handler of job ${job.id} \\(t\\) ran past its 50 ms timeout`));
      expect(warn?.obj).toMatchObject({ jobId: job.id, task: 't', timeoutMs: 50 });
    } finally {
      await worker.stop();
    }
  });
});

describe('TxManager logger', async () => {
  const { pool } = await useTestDatabase();

  it('logs a retry at debug and a throwing afterCommit at error (instead of a process warning)', async () => {
    const { lines, logger } = recordingLogger();
    const warnings: unknown[] = [];
    const onWarning = (w: unknown) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const tm = new TxManager(pool, { logger });
      let calls = 0;
      await tm.doOrThrow(
        async (tx) => {
          if (++calls === 1)
            await tx.query(`DO $$ BEGIN RAISE EXCEPTION 'c' USING ERRCODE = '40001'; END $$`);
          tx.afterCommit(() => {
            throw new Error('webhook down');
          });
          return 1;
        },
        { name: 'pay', backoff: { baseMs: 1, capMs: 1 } },
      );
      await new Promise((resolve) => setImmediate(resolve));
      expect(lines.find((l) => l.level === 'debug')?.obj).toMatchObject({
        name: 'pay',
        attempt: 1,
        kind: 'SerializationFailure',
      });
      const error = lines.find((l) => l.level === 'error');
      expect(error?.obj).toMatchObject({ source: 'afterCommit', name: 'pay' });
      expect(error?.obj.err).toMatchObject({ message: 'webhook down' });
      expect(warnings).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('a worker through a database outage', async () => {
  const { pool, url } = await useTestDatabase();

  it('logs one error per failure streak for reap, heartbeat and prune, then debug lines, and info when each works again', async () => {
    const { lines, logger } = recordingLogger();
    const schema = 'log_outage';
    const setup = new Queue({ pool, txManager: new TxManager(pool), schema, tasks: { t: z.object({}) } });
    (await setup.migrate())._unsafeUnwrap();
    const proxy = await FaultProxy.start({ target: url });
    const through = new pg.Pool({ connectionString: proxy.url, max: 4 });
    const queue = new Queue({
      pool: through,
      txManager: new TxManager(through),
      schema,
      tasks: { t: z.object({}) },
      logger,
    });
    (await queue.enqueue(pool, 't', {}))._unsafeUnwrap();
    const g = gate();
    const failures = new Map<string, number>();
    const worker = queue.work(
      { t: () => g.at('hold') },
      {
        concurrency: 1,
        listen: false,
        lease: '5s', // the heartbeat extends the running job's lease every 0.8 s or so once it is 1.7 s old
        reapInterval: 20,
        retention: { olderThan: '7d', every: '1s' },
        hooks: { onError: (_e, phase) => void failures.set(phase, (failures.get(phase) ?? 0) + 1) },
      },
    );
    try {
      await g.reached('hold');
      // The outage: every connection cut, every new one refused.
      proxy.retarget({ host: '127.0.0.1', port: await closedPort() });
      proxy.dropAll();
      await eventually(
        () =>
          (failures.get('reap') ?? 0) >= 10 &&
          (failures.get('prune') ?? 0) >= 2 &&
          (failures.get('heartbeat') ?? 0) >= 2,
        20_000,
      );
      for (const phase of ['reap', 'prune', 'heartbeat']) {
        const of = lines.filter((l) => l.obj.phase === phase);
        const errors = of.filter((l) => l.level === 'error');
        // The naive control: a line at error per failure is what the hooks count (onError is still called each time).
        expect(failures.get(phase)).toBeGreaterThan(1);
        expect(errors, phase).toHaveLength(1);
        expect(errors[0]?.obj.streak).toBe(1);
        const repeats = of.filter((l) => l.level === 'debug');
        expect(repeats.length, phase).toBeGreaterThanOrEqual(1);
        expect(repeats.map((l) => l.obj.streak)).toEqual(repeats.map((_, i) => i + 2));
      }
      // The database is back: each says so once, at info.
      proxy.retarget(url);
      await eventually(
        () =>
          ['reap', 'prune', 'heartbeat'].every((phase) =>
            lines.some((l) => l.level === 'info' && l.obj.phase === phase),
          ),
        20_000,
      );
      const reapBack = lines.find((l) => l.level === 'info' && l.obj.phase === 'reap');
      expect(reapBack?.msg).toMatch(/reap works again after \d+ failures/);
    } finally {
      g.open('hold');
      await worker.stop();
      await through.end();
      await proxy.close();
    }
  });
});
