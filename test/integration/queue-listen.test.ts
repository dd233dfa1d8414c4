// The worker's LISTEN session is a connection of its own, not a slot of the user's pool: a worker works
// on a pool of `max: 1` (common on serverless), N workers work on a pool of N, and stop() always
// resolves. Pools here are built as the README shows them: no 'error' listener, no big pool.
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { JobEndEvent, QueueWorker } from '../../src/queue/index.js';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { url, pool: admin } = await useTestDatabase({ max: 4 });
const tasks = { work: z.object({ n: z.number().int() }) };
let seq = 0;
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A pool as the README builds it, closed after the test. */
function userPool(max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  cleanup.push(() => pool.end());
  return pool;
}

async function queueOn(pool: pg.Pool, schema = `q_listen_${++seq}`) {
  const queue = new Queue({ pool, txManager: new TxManager(pool), schema, tasks });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

function endsOf(worker: () => QueueWorker | undefined) {
  const ends: JobEndEvent[] = [];
  return { ends, hooks: { onJobEnd: (e: JobEndEvent) => ends.push(e) }, worker };
}

// These tests need sessions of their own: the pgbouncer project leaves this file out (vitest.config.ts);
// behind a transaction-mode pooler the worker refuses LISTEN (security-pooler-refusal.test.ts).
describe('LISTEN on its own connection', () => {
  it('a worker on a pool of max 1 runs jobs woken by NOTIFY and stop() resolves', {
    timeout: 30_000,
  }, async () => {
    const pool = userPool(1);
    const queue = await queueOn(pool);
    const rec = endsOf(() => undefined);
    // pollInterval of an hour: only a NOTIFY heard on the LISTEN connection can wake the worker.
    const worker = queue.work({ work: () => {} }, { pollInterval: '1h', hooks: rec.hooks });
    await eventually(() => worker.listening);
    (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    (await queue.enqueue(pool, 'work', { n: 2 }))._unsafeUnwrap();
    await eventually(() => rec.ends.length === 2);
    await worker.stop();
    expect(rec.ends.map((e) => e.outcome)).toEqual(['completed', 'completed']);
    expect(pool.totalCount).toBeLessThanOrEqual(1);
    const left = await admin.query(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs`);
    expect(left.rows[0]?.n).toBe(0);
  });

  it('three workers on a pool of three run every job and all stop', { timeout: 30_000 }, async () => {
    const pool = userPool(3);
    const queue = await queueOn(pool);
    const ends: JobEndEvent[] = [];
    const workers = [1, 2, 3].map(() =>
      queue.work(
        { work: () => {} },
        { concurrency: 2, pollInterval: '1h', hooks: { onJobEnd: (e) => ends.push(e) } },
      ),
    );
    await eventually(() => workers.every((w) => w.listening));
    (
      await queue.enqueueMany(
        pool,
        'work',
        Array.from({ length: 30 }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    await eventually(() => ends.length === 30);
    await Promise.all(workers.map((w) => w.stop()));
    expect(ends.every((e) => e.outcome === 'completed')).toBe(true);
  });

  it('the LISTEN session is not a pool client', { timeout: 30_000 }, async () => {
    const pool = userPool(2);
    const queue = await queueOn(pool);
    const worker = queue.work({ work: () => {} }, { pollInterval: '1h' });
    await eventually(() => worker.listening);
    // The pool's clients are all idle (none is held for LISTEN), yet a session is listening.
    await eventually(() => pool.totalCount === pool.idleCount);
    const listeners = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
      [`LISTEN "${queue.channel}"`],
    );
    expect(listeners.rows[0]?.n).toBe(1);
    await worker.stop();
  });

  it('stop() resolves while every pool slot is held by the user (the claim cannot get a client)', {
    timeout: 30_000,
  }, async () => {
    const pool = userPool(1);
    const queue = await queueOn(pool);
    const held = await pool.connect();
    const worker = queue.work({ work: () => {} }, { graceMs: 200 });
    await eventually(() => worker.listening);
    await worker.stop();
    await worker.done;
    held.release();
  });

  it('stop() right after start resolves while the LISTEN connection is still connecting', {
    timeout: 30_000,
  }, async () => {
    const pool = userPool(1);
    const queue = await queueOn(pool);
    for (let i = 0; i < 10; i++) {
      const worker = queue.work({ work: () => {} });
      await worker.stop();
      expect(worker.listening).toBe(false);
    }
  });
});
