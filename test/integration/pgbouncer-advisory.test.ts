import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { migrateSingleRun, singleRun } from '../../src/advisory/single-run.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { Queue } from '../../src/queue/queue.js';
import { gate } from '../../src/testing/gate.js';
import {
  findPgBouncer,
  PgBouncerNotInstalled,
  type StartedPgBouncer,
  startPgBouncer,
} from '../../src/testing/pgbouncer.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { url, pool: direct } = await useTestDatabase();
const binary = await findPgBouncer();
// Without pgbouncer, vitest.config.ts leaves this file out with one line saying so (and fails the run
// when PG_TXKIT_REQUIRE_PGBOUNCER=1, as .ci/run sets).

async function advisoryLocksOnServer(): Promise<number> {
  const { rows } = await direct.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return rows[0]!.n;
}

describe('startPgBouncer', () => {
  it('a missing binary is a clear, typed error that says how to install it', async () => {
    const started = startPgBouncer({
      target: url,
      poolMode: 'transaction',
      binary: '/nonexistent/pgbouncer',
    });
    await expect(started).rejects.toBeInstanceOf(PgBouncerNotInstalled);
    await expect(started).rejects.toThrow(/apt-get install -y pgbouncer/);
  });
});

describe.runIf(binary)('through PgBouncer in transaction pooling mode', () => {
  let bouncer: StartedPgBouncer;
  let pool: pg.Pool;
  let tm: TxManager;
  beforeAll(async () => {
    bouncer = await startPgBouncer({ target: url, poolMode: 'transaction', poolSize: 3 });
    pool = new pg.Pool({ connectionString: bouncer.url, max: 8 });
    tm = new TxManager(pool);
  });
  afterAll(async () => {
    await pool?.end();
    await bouncer?.stop();
    expect(await advisoryLocksOnServer()).toBe(0);
  });

  it('really multiplexes: two client connections are served by one backend', async () => {
    const a = await pool.connect();
    const b = await pool.connect();
    try {
      const pa = (await a.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const pb = (await b.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      expect(pb).toBe(pa); // impossible on a direct connection or in session mode
    } finally {
      a.release();
      b.release();
    }
  });

  it('withAdvisoryLock excludes (try → LockBusy) and leaves nothing behind', async () => {
    const key = advisoryKey('pgbouncer', 'xact');
    const g = gate();
    const first = withAdvisoryLock(tm, key, async (tx) => {
      await g.at('holding');
      return (await tx.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n;
    });
    await g.reached('holding');
    const busy = await withAdvisoryLock(tm, key, () => 0, { wait: 'try' });
    expect(busy.isErr() && busy.error.kind).toBe('LockBusy');
    g.open('holding');
    expect((await first)._unsafeUnwrap()).toBe(1);
    const runs = await Promise.all(Array.from({ length: 12 }, (_, i) => withAdvisoryLock(tm, key, () => i)));
    expect(runs.every((r) => r.isOk())).toBe(true);
    expect(await advisoryLocksOnServer()).toBe(0);
  });

  it('singleRun runs once through the pooler', async () => {
    (await migrateSingleRun(direct))._unsafeUnwrap();
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => singleRun(tm, { name: 'pgbouncer-job', key: 'k' }, () => i)),
    );
    const ran = results.filter((r) => r.isOk());
    expect(ran).toHaveLength(1); // the first to lock runs; the others see LockBusy or AlreadyDone
    const kinds = results.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind);
    expect(kinds.every((k) => k === 'AlreadyDone' || k === 'LockBusy')).toBe(true);
    const { rows } = await direct.query(
      "SELECT count(*)::int AS n FROM pg_txkit_single_run WHERE name = 'pgbouncer-job'",
    );
    expect(rows[0].n).toBe(1);
    const again = await singleRun(tm, { name: 'pgbouncer-job', key: 'k' }, () => -1);
    expect(again.isErr() && again.error.kind).toBe('AlreadyDone');
    expect(await advisoryLocksOnServer()).toBe(0);
  });

  it("the queue's enqueue / claim / complete work through the pooler", async () => {
    const directTm = new TxManager(direct);
    const migrateQueue = new Queue({
      pool: direct,
      txManager: directTm,
      schema: 'bouncer_q',
      tasks: { t: z.object({ n: z.number() }) },
    });
    (await migrateQueue.migrate())._unsafeUnwrap();
    const queue = new Queue({
      pool,
      txManager: tm,
      schema: 'bouncer_q',
      tasks: { t: z.object({ n: z.number() }) },
    });
    for (let n = 0; n < 5; n++) (await queue.enqueue(pool, 't', { n }))._unsafeUnwrap();
    const claimed = (await Promise.all([queue.claim({ batch: 3 }), queue.claim({ batch: 3 })])).flatMap((r) =>
      r._unsafeUnwrap(),
    );
    expect(new Set(claimed.map((j) => j.id)).size).toBe(claimed.length); // SKIP LOCKED: no job twice
    expect(claimed).toHaveLength(5);
    for (const job of claimed) (await queue.complete(job))._unsafeUnwrap();
    const stats = (await queue.stats())._unsafeUnwrap();
    expect(stats.pending + stats.running).toBe(0);
  });

  it('SessionLock is refused with TransactionPoolerDetected (detected by the probe) and locks nothing', async () => {
    const key = advisoryKey('pgbouncer', 'leader');
    const result = await SessionLock.acquire(bouncer.url, key, { checkEvery: 1000 });
    expect(result.isErr() && result.error.kind).toBe('TransactionPoolerDetected');
    expect(await advisoryLocksOnServer()).toBe(0);
  });

  it("SessionLock is refused at once when declared with pooler: 'transaction'", async () => {
    const result = await SessionLock.acquire(bouncer.url, 1n, { pooler: 'transaction' });
    expect(result.isErr() && result.error.kind).toBe('TransactionPoolerDetected');
  });
});

describe.runIf(binary)('through PgBouncer in session pooling mode', () => {
  it('SessionLock works (a session-mode pooler keeps one backend per client) and detects a lost backend', async () => {
    const bouncer = await startPgBouncer({ target: url, poolMode: 'session', poolSize: 4 });
    try {
      const key = advisoryKey('pgbouncer', 'session-leader');
      const lock = (await SessionLock.acquire(bouncer.url, key, { checkEvery: 100 }))._unsafeUnwrap();
      expect(lock.held).toBe(true);
      const busy = await SessionLock.acquire(bouncer.url, key);
      expect(busy.isErr() && busy.error.kind).toBe('LockBusy');
      await direct.query('SELECT pg_terminate_backend($1)', [lock.pid]);
      await new Promise<void>((resolve, reject) => {
        // The check runs every 100 ms: `lost` may have fired while the terminate statement returned.
        if (lock.lost.aborted) return resolve();
        const timer = setTimeout(() => reject(new Error('lost did not fire within 15 s')), 15_000);
        lock.lost.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      expect(lock.held).toBe(false);
      await lock.release();
    } finally {
      await bouncer.stop();
    }
  });
});
