import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { JobContext, JobEndEvent } from '../../src/queue/index.js';
import { Queue } from '../../src/queue/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually, leaks } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
// The worker's LISTEN needs a session of its own: through a transaction-mode pooler its pool is direct.
const workerPool = new pg.Pool({ connectionString: url });
const workerTm = new TxManager(workerPool);
const tm = new TxManager(pool);
afterAll(async () => {
  await workerPool.end();
});
const WORKER_SCRIPT = fileURLToPath(new URL('../fixtures/queue-cancel-worker.mjs', import.meta.url));
const BUILT = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
const tasks = { work: z.object({ n: z.number().int() }) };
let seq = 0;

/** Two handles on one queue schema: the worker's (its own pool) and the operator's (another pool). */
async function twoQueues() {
  const schema = `q_cancel_${++seq}`;
  const operator = new Queue({ pool, txManager: tm, schema, tasks, archive: true });
  (await operator.migrate())._unsafeUnwrap();
  const workerSide = new Queue({ pool: workerPool, txManager: workerTm, schema, tasks, archive: true });
  await pool.query(`CREATE TABLE ${schema}.effects (n int PRIMARY KEY)`);
  return { operator, workerSide, schema };
}

function ended() {
  const ends: JobEndEvent[] = [];
  let resolve: () => void = () => {};
  const first = new Promise<void>((r) => {
    resolve = r;
  });
  return {
    ends,
    first,
    hooks: {
      onJobEnd: (e: JobEndEvent) => {
        ends.push(e);
        resolve();
      },
    },
  };
}

/** Resolves with the signal's reason once it aborts. */
function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });
}

/**
 * A handler that waits at gate 'running', then for its signal to abort, then still tries to write its
 * effect in `ctx.transaction`; `done` resolves with the abort reason and the transaction's outcome.
 */
function cancellable(schema: string, g: ReturnType<typeof gate>) {
  let finish: (r: { reason: unknown; txKind: string }) => void = () => {};
  const done = new Promise<{ reason: unknown; txKind: string }>((resolve) => {
    finish = resolve;
  });
  const handler = async (j: { payload: { n: number } }, ctx: JobContext) => {
    await g.at('running');
    const reason = await aborted(ctx.signal);
    // Still writing after the abort: the transaction's completion is fenced, so it rolls back.
    const r = await ctx.transaction((tx) =>
      tx.query(`INSERT INTO ${schema}.effects VALUES ($1)`, [j.payload.n]),
    );
    finish({ reason, txKind: r.isErr() ? r.error.kind : 'ok' });
  };
  return { handler, done };
}

afterEach(async () => {
  expect(await leaks(pool)).toEqual({ checkedOut: 0, idleInTransaction: 0 });
});

describe('cancel a running job', () => {
  it("aborts the handler's signal in another worker (JobCancelled, over LISTEN); its settle and transaction write nothing", async () => {
    const { operator, workerSide, schema } = await twoQueues();
    const job = (await operator.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = ended();
    const h = cancellable(schema, g);
    // A long lease: the heartbeat (a third of it) cannot be what finds the cancel during this test.
    const worker = workerSide.work({ work: h.handler }, { lease: '10min', hooks: rec.hooks });
    await eventually(() => worker.listening);
    g.open('running');
    await g.reached('running');
    const cancelled = await operator.cancel(job.id);
    expect(cancelled._unsafeUnwrap()).toEqual({ id: job.id, state: 'running' });
    await rec.first;
    const { reason, txKind } = await h.done;
    await worker.stop();
    expect((reason as { kind?: string }).kind).toBe('JobCancelled');
    expect((reason as { id?: string }).id).toBe(job.id);
    expect(rec.ends.map((e) => e.outcome)).toEqual(['cancelled']);
    expect(worker.counters).toMatchObject({ cancelled: 1, completed: 0, failed: 0, lost: 0 });
    expect(txKind).toBe('LeaseLost');
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n).toBe(0);
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs`)).rows[0].n).toBe(0);
    const archived = await pool.query(`SELECT id, state FROM ${schema}.jobs_archive`);
    expect(archived.rows).toEqual([{ id: job.id, state: 'cancelled' }]);
    expect((await operator.job(job.id))._unsafeUnwrap().state).toBe('cancelled');
  });

  it('with LISTEN off, the heartbeat finds the lease gone: the signal aborts (LeaseLost), nothing written', async () => {
    const { operator, workerSide, schema } = await twoQueues();
    const job = (await operator.enqueue(pool, 'work', { n: 2 }))._unsafeUnwrap();
    const g = gate();
    const rec = ended();
    const h = cancellable(schema, g);
    const worker = workerSide.work({ work: h.handler }, { listen: false, lease: '5s', hooks: rec.hooks });
    g.open('running');
    await g.reached('running');
    expect((await operator.cancel(job.id))._unsafeUnwrap().state).toBe('running');
    await rec.first;
    const { reason, txKind } = await h.done;
    await worker.stop();
    expect((reason as { kind?: string }).kind).toBe('LeaseLost');
    expect(txKind).toBe('LeaseLost');
    expect(rec.ends.map((e) => e.outcome)).toEqual(['lost']);
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n).toBe(0);
    const archived = await pool.query(`SELECT state FROM ${schema}.jobs_archive`);
    expect(archived.rows).toEqual([{ state: 'cancelled' }]);
  });

  it('a handler that ignores the signal: its run still ends as cancelled and its completion writes nothing', async () => {
    const { operator, workerSide, schema } = await twoQueues();
    const job = (await operator.enqueue(pool, 'work', { n: 3 }))._unsafeUnwrap();
    const g = gate();
    const rec = ended();
    const worker = workerSide.work({ work: () => g.at('hold') }, { lease: '10min', hooks: rec.hooks });
    await eventually(() => worker.listening);
    await g.reached('hold');
    (await operator.cancel(job.id))._unsafeUnwrap();
    await rec.first; // the run ended at the abort, before the handler returned
    g.open('hold');
    await worker.stop();
    expect(rec.ends.map((e) => e.outcome)).toEqual(['cancelled']);
    const archived = await pool.query(`SELECT state FROM ${schema}.jobs_archive`);
    expect(archived.rows).toEqual([{ state: 'cancelled' }]);
  });
});

describe('cancel across processes', () => {
  it('a cancel from this process aborts the handler running in a worker process; nothing but the cancelled archive row is written', async () => {
    const { operator, schema } = await twoQueues();
    await pool.query(
      `CREATE TABLE ${schema}.seen (at serial PRIMARY KEY, n int NOT NULL, what text NOT NULL)`,
    );
    const seen = async () =>
      (await pool.query<{ n: number; what: string }>(`SELECT n, what FROM ${schema}.seen ORDER BY at`)).rows;
    // The child runs the built package (dist/), as the doc snippets do: `npm test` builds it first.
    expect(existsSync(BUILT), 'dist/index.js is missing: run `npm run build` first').toBe(true);
    const child = spawn(process.execPath, [WORKER_SCRIPT], {
      env: { ...process.env, QUEUE_URL: url, QUEUE_SCHEMA: schema },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await eventually(async () => (await seen()).some((r) => r.what === 'listening'));
      const job = (await operator.enqueue(pool, 'work', { n: 7 }))._unsafeUnwrap();
      await eventually(async () => (await seen()).some((r) => r.n === 7 && r.what === 'started'));
      expect((await operator.cancel(job.id))._unsafeUnwrap()).toEqual({ id: job.id, state: 'running' });
      await eventually(async () => (await seen()).filter((r) => r.n === 7).length === 3);
      const events = (await seen()).filter((r) => r.n === 7).map((r) => r.what);
      expect(events.sort()).toEqual(['end:cancelled', 'reason:JobCancelled tx:LeaseLost', 'started']);
      expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n).toBe(0);
      expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs`)).rows[0].n).toBe(0);
      const archived = await pool.query(`SELECT id, state FROM ${schema}.jobs_archive`);
      expect(archived.rows).toEqual([{ id: job.id, state: 'cancelled' }]);
    } finally {
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  });
});

describe('cancel in other states', () => {
  it('pending: removed, archived as cancelled, never runs; dead: removed, not redriven; NotFound when absent', async () => {
    const { operator, schema } = await twoQueues();
    const pending = (await operator.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const doomed = (await operator.enqueue(pool, 'work', { n: 2 }, { maxAttempts: 1 }))._unsafeUnwrap();
    // Make the second one dead: claim it (first by priority? both priority 0: id order) and fail it.
    expect((await operator.cancel(pending.id))._unsafeUnwrap()).toEqual({ id: pending.id, state: 'pending' });
    const [claimed] = (await operator.claim())._unsafeUnwrap();
    expect(claimed?.id).toBe(doomed.id);
    expect((await operator.fail(claimed!, 'boom'))._unsafeUnwrap().state).toBe('dead');
    expect((await operator.cancel(doomed.id))._unsafeUnwrap()).toEqual({ id: doomed.id, state: 'dead' });
    expect((await operator.redrive())._unsafeUnwrap()).toEqual([]);
    expect((await operator.claim())._unsafeUnwrap()).toEqual([]);
    const archived = await pool.query(`SELECT id, state FROM ${schema}.jobs_archive ORDER BY id`);
    expect(archived.rows).toEqual([
      { id: pending.id, state: 'cancelled' },
      { id: doomed.id, state: 'cancelled' },
    ]);
    expect((await operator.cancel(pending.id))._unsafeUnwrapErr().kind).toBe('NotFound');
    expect((await operator.cancel('12345'))._unsafeUnwrapErr().kind).toBe('NotFound');
  });

  it('a completion that commits first wins: the cancel finds nothing (NotFound) and no cancel is sent', async () => {
    const { operator, schema } = await twoQueues();
    const job = (await operator.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const [claimed] = (await operator.claim())._unsafeUnwrap();
    (await operator.complete(claimed!))._unsafeUnwrap();
    expect((await operator.cancel(job.id))._unsafeUnwrapErr().kind).toBe('NotFound');
    const archived = await pool.query(`SELECT state FROM ${schema}.jobs_archive`);
    expect(archived.rows).toEqual([{ state: 'done' }]);
  });

  it("a job claimed into a worker's local queue and cancelled before it starts never runs", async () => {
    const { operator, workerSide } = await twoQueues();
    const first = (await operator.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const second = (await operator.enqueue(pool, 'work', { n: 2 }))._unsafeUnwrap();
    const g = gate();
    const ran: number[] = [];
    // One slot and a fixed local queue: the second job is claimed with the first and waits in the buffer.
    const worker = workerSide.work(
      {
        work: async (j) => {
          ran.push(j.payload.n);
          if (j.payload.n === 1) await g.at('first');
        },
      },
      { concurrency: 1, prefetch: 5, lease: '10min' },
    );
    await eventually(() => worker.listening);
    await g.reached('first');
    const state = await pool.query(`SELECT state FROM ${operator.schema}.jobs WHERE id = $1`, [second.id]);
    expect(state.rows[0]?.state).toBe('running'); // claimed (leased) by the worker, not started
    (await operator.cancel(second.id))._unsafeUnwrap();
    await eventually(() => worker.counters.cancelled === 1);
    g.open('first');
    await eventually(() => worker.counters.completed === 1);
    await worker.stop();
    expect(ran).toEqual([1]);
    expect(first.id).not.toBe(second.id);
  });
});
