import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Job, JobEndEvent, WorkerHooks } from '../../src/queue/index.js';
import { Queue } from '../../src/queue/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually, expireLeases, leaks } from '../fixtures/queue-helpers.js';
import { recordingLogger } from '../fixtures/recording-logger.js';
import { useTestDatabase, viaPgBouncer } from '../helpers.js';

const { pool, url } = await useTestDatabase();
const tm = new TxManager(pool);
// LISTEN needs a session of its own: behind a transaction-mode pooler (the `pgbouncer` project) the
// LISTEN tests use a direct pool; through the pooler the worker refuses LISTEN
// (test/integration/security-pooler-refusal.test.ts).
const sessionPool = viaPgBouncer() ? new pg.Pool({ connectionString: url, max: 10 }) : pool;
const sessionTm = sessionPool === pool ? tm : new TxManager(sessionPool);
afterAll(async () => {
  if (sessionPool !== pool) await sessionPool.end();
});
const tasks = { work: z.object({ n: z.number().int() }) };
let seq = 0;

async function freshQueue(session = false) {
  const queue = new Queue({
    pool: session ? sessionPool : pool,
    txManager: session ? sessionTm : tm,
    schema: `q_worker_${++seq}`,
    tasks,
    backoff: { baseMs: 0, capMs: 0 },
  });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

/** Hooks that record job ends and resolve when `count` jobs have ended. */
function recorder() {
  const ends: JobEndEvent[] = [];
  const starts: { job: Job; at: number }[] = [];
  const errors: { error: unknown; phase: string }[] = [];
  const watchers: { count: number; resolve: () => void }[] = [];
  const hooks: WorkerHooks = {
    onJobStart: (job) => starts.push({ job, at: performance.now() }),
    onJobEnd: (event) => {
      ends.push(event);
      for (const w of watchers.filter((x) => ends.length >= x.count)) w.resolve();
    },
    onError: (error, phase) => errors.push({ error, phase }),
  };
  const ended = (count: number) =>
    new Promise<void>((resolve) => {
      if (ends.length >= count) resolve();
      else watchers.push({ count, resolve });
    });
  return { ends, starts, errors, hooks, ended };
}

async function rows(queue: Queue) {
  const r = await pool.query<{ id: string; state: string; attempts: number; last_error: string | null }>(
    `SELECT id, state, attempts, last_error FROM ${queue.schema}.jobs ORDER BY id`,
  );
  return r.rows;
}

afterEach(async () => {
  expect(await leaks(pool)).toEqual({ checkedOut: 0, idleInTransaction: 0 });
});

describe('worker', () => {
  it('runs every job once, batching claims and settles', async () => {
    const queue = await freshQueue();
    (
      await queue.enqueueMany(
        pool,
        'work',
        Array.from({ length: 300 }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    const seen: number[] = [];
    const rec = recorder();
    const worker = queue.work(
      { work: async (job) => void seen.push(job.payload.n) },
      // Behind a transaction-mode pooler the worker polls (LISTEN needs a session of its own).
      { concurrency: 8, batch: 8, hooks: rec.hooks, listen: viaPgBouncer() === undefined },
    );
    await rec.ended(300);
    await worker.stop();
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: 300 }, (_, n) => n));
    expect(rec.ends.every((e) => e.outcome === 'completed')).toBe(true);
    expect(worker.counters).toMatchObject({ started: 300, completed: 300, failed: 0, lost: 0, errors: 0 });
    expect(await rows(queue)).toEqual([]);
  });

  it('a throwing handler fails the job; it is retried, then dead when attempts are used up', async () => {
    const queue = await freshQueue();
    const flaky = (await queue.enqueue(pool, 'work', { n: 1 }, { maxAttempts: 3 }))._unsafeUnwrap();
    const hopeless = (await queue.enqueue(pool, 'work', { n: 2 }, { maxAttempts: 2 }))._unsafeUnwrap();
    const runs = new Map<number, number>();
    const rec = recorder();
    const worker = queue.work(
      {
        work: async (job) => {
          runs.set(job.payload.n, (runs.get(job.payload.n) ?? 0) + 1);
          if (job.payload.n === 2 || job.attempts < 2) throw new Error(`fail ${job.payload.n}`);
        },
      },
      { concurrency: 2, pollInterval: 20, hooks: rec.hooks },
    );
    await rec.ended(4);
    await worker.stop();
    expect(runs.get(1)).toBe(2);
    expect(runs.get(2)).toBe(2);
    expect(rec.ends.map((e) => `${e.job.id}:${e.outcome}`).sort()).toEqual(
      [`${flaky.id}:failed`, `${flaky.id}:completed`, `${hopeless.id}:failed`, `${hopeless.id}:dead`].sort(),
    );
    expect(await rows(queue)).toEqual([
      { id: hopeless.id, state: 'dead', attempts: 2, last_error: 'Error: fail 2' },
    ]);
  });

  it('graceful stop: stops claiming, lets running handlers finish, flushes their settles', async () => {
    const queue = await freshQueue();
    (await queue.enqueueMany(pool, 'work', [{ n: 1 }, { n: 2 }, { n: 3 }]))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    const worker = queue.work(
      { work: () => g.at('hold') },
      { concurrency: 3, batch: 3, hooks: rec.hooks, graceMs: 30_000 },
    );
    await g.reached('hold', 3);
    const stopped = worker.stop();
    const late = (await queue.enqueue(pool, 'work', { n: 4 }))._unsafeUnwrap();
    g.open('hold');
    await stopped;
    expect(rec.ends.map((e) => e.outcome)).toEqual(['completed', 'completed', 'completed']);
    expect(await rows(queue)).toEqual([{ id: late.id, state: 'pending', attempts: 0, last_error: null }]);
    expect(worker.active).toBe(0);
    await worker.done;
  });

  it('prefetch: claims ahead of free slots into a local buffer; stop releases the buffered jobs', async () => {
    const queue = await freshQueue();
    const ids = (
      await queue.enqueueMany(
        pool,
        'work',
        [1, 2, 3, 4, 5].map((n) => ({ n })),
      )
    )._unsafeUnwrap().ids;
    const g = gate();
    const rec = recorder();
    const worker = queue.work(
      { work: () => g.at('hold') },
      { concurrency: 1, prefetch: 3, batch: 10, hooks: rec.hooks },
    );
    await g.reached('hold');
    await eventually(async () => (await rows(queue)).filter((r) => r.state === 'running').length === 4);
    const stopped = worker.stop();
    g.open('hold');
    await stopped;
    expect(rec.ends.map((e) => e.outcome)).toEqual(['completed']);
    expect(worker.counters).toMatchObject({ started: 1, completed: 1, released: 3 });
    expect(await rows(queue)).toEqual(
      ids.slice(1).map((id) => ({ id, state: 'pending', attempts: 0, last_error: null })),
    );
  });

  it('prefetch feeds short handlers from one claim', async () => {
    const queue = await freshQueue();
    (
      await queue.enqueueMany(
        pool,
        'work',
        Array.from({ length: 200 }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    const rec = recorder();
    const worker = queue.work(
      { work: () => {} },
      { concurrency: 2, prefetch: 30, batch: 32, hooks: rec.hooks },
    );
    await rec.ended(200);
    await worker.stop();
    expect(worker.counters).toMatchObject({ started: 200, completed: 200, released: 0, lost: 0 });
    expect(await rows(queue)).toEqual([]);
  });

  it('default prefetch holds nothing at low load: with its slots busy, a trickle of jobs goes to another worker', async () => {
    const queue = await freshQueue(true);
    const g = gate();
    // A worker with the defaults only; its handler slots (4) fill with jobs that wait on the gate.
    const busy = queue.work({
      work: async () => {
        await g.at('hold');
      },
    });
    (
      await queue.enqueueMany(
        sessionPool,
        'work',
        [0, 1, 2, 3].map((n) => ({ n })),
      )
    )._unsafeUnwrap();
    await g.reached('hold', 4);
    const ran: number[] = [];
    const idle = queue.work({ work: (job) => void ran.push(job.payload.n) }, { concurrency: 1 });
    // A trickle: one job at a time, the next once the previous one is done (its row deleted).
    for (const n of [10, 11, 12, 13, 14, 15, 16, 17]) {
      const { id } = (await queue.enqueue(sessionPool, 'work', { n }))._unsafeUnwrap();
      await eventually(async () => !(await rows(queue)).some((r) => r.id === id), 5000);
    }
    // Every trickled job ran on the idle worker; the busy one started none and holds none.
    expect(ran).toEqual([10, 11, 12, 13, 14, 15, 16, 17]);
    expect(busy.counters.started).toBe(4);
    expect((await rows(queue)).map((r) => r.state)).toEqual(['running', 'running', 'running', 'running']);
    g.open('hold');
    await Promise.all([busy.stop(), idle.stop()]);
    expect(busy.counters).toMatchObject({ started: 4, completed: 4, released: 0 });
  });

  it('forced stop after graceMs aborts handlers and releases their jobs without charging the attempt', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    let sawAbort = false;
    const worker = queue.work(
      {
        work: async (_job, { signal }) => {
          await g.at('started');
          await new Promise<void>((resolve) =>
            signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true }),
          );
          sawAbort = true;
        },
      },
      { concurrency: 1, hooks: rec.hooks, graceMs: 20 },
    );
    g.open('started');
    await g.reached('started');
    await worker.stop();
    expect(sawAbort).toBe(true);
    expect(rec.ends.map((e) => e.outcome)).toEqual(['released']);
    expect(await rows(queue)).toEqual([{ id: job.id, state: 'pending', attempts: 0, last_error: null }]);
  });

  it('stop never gives back a job whose handler still runs: a handler ignoring its abort keeps its job leased, and no one else can claim it', async () => {
    const { lines, logger } = recordingLogger();
    const queue = new Queue({ pool, txManager: tm, schema: `q_worker_${++seq}`, tasks, logger });
    (await queue.migrate())._unsafeUnwrap();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    let inFlight = 0;
    // The handler awaits a call that takes no signal (held by the gate): aborting it changes nothing.
    const worker = queue.work(
      {
        work: async () => {
          inFlight++;
          try {
            await g.at('third-party call');
          } finally {
            inFlight--;
          }
        },
      },
      { concurrency: 1, hooks: rec.hooks, graceMs: 20 },
    );
    await g.reached('third-party call');
    await worker.stop();
    expect(inFlight).toBe(1); // the first run is still in progress
    // Another claimer right now: the job is not pending, so it does not run a second time concurrently
    // (the stopping worker used to release it while its handler still ran: this claim got it).
    expect((await queue.claim({ lease: '1m' }))._unsafeUnwrap()).toEqual([]);
    expect(await rows(queue)).toEqual([{ id: job.id, state: 'running', attempts: 1, last_error: null }]);
    expect(rec.ends.map((e) => e.outcome)).toEqual(['unsettled']);
    expect(worker.counters).toMatchObject({ started: 1, released: 0, unsettled: 1 });
    const warned = lines.filter((l) => l.level === 'warn');
    expect(warned).toHaveLength(1);
    expect(warned[0]?.obj).toMatchObject({ jobIds: [job.id] });
    expect(warned[0]?.msg).toMatch(new RegExp(`jobs ${job.id} are left leased until their lease lapses`));
    g.open('third-party call');
    await eventually(() => inFlight === 0);
    // Its return after stop() writes nothing: the job is still leased, left to the reaper.
    expect(await rows(queue)).toEqual([{ id: job.id, state: 'running', attempts: 1, last_error: null }]);
    await expireLeases(pool, queue.schema);
    expect((await queue.reap())._unsafeUnwrap()).toMatchObject({ requeued: 1 });
  });

  it('a stopped worker no longer heartbeats the job its stuck handler holds: the lease lapses, another worker runs it, and the stuck handler`s late ctx.transaction is fenced out', {
    timeout: 30_000,
  }, async () => {
    const queue = await freshQueue();
    await pool.query(`CREATE TABLE ${queue.schema}.effects (run text)`);
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    let late: string | undefined;
    const stuck = queue.work(
      {
        work: async (_job, ctx) => {
          await g.at('stuck');
          const r = await ctx.transaction((tx) =>
            tx.query(`INSERT INTO ${queue.schema}.effects VALUES ('stuck')`),
          );
          late = r.isErr() ? r.error.kind : 'ok';
          await g.at('after-late');
        },
      },
      { concurrency: 1, lease: '5s', graceMs: 20 },
    );
    await g.reached('stuck');
    await stuck.stop();
    expect(stuck.counters).toMatchObject({ unsettled: 1, released: 0 });
    // A second worker gets the job only once its lease has lapsed for real (the stopped worker's heartbeat
    // would keep it leased forever): the reaper gives it back and the second worker runs it.
    const rec = recorder();
    const next = queue.work(
      {
        work: async (_job, ctx) => {
          const r = await ctx.transaction((tx) =>
            tx.query(`INSERT INTO ${queue.schema}.effects VALUES ('next')`),
          );
          if (r.isErr()) throw r.error;
        },
      },
      { concurrency: 1, reapInterval: 100, pollInterval: 100, hooks: rec.hooks },
    );
    await rec.ended(1);
    await next.stop();
    expect(rec.ends[0]).toMatchObject({ outcome: 'completed' });
    expect(rec.ends[0]?.job).toMatchObject({ id: job.id, attempts: 2 });
    // The stuck handler's completion, late, is fenced by the lease token: rolled back, LeaseLost.
    g.open('stuck');
    await g.reached('after-late');
    expect(late).toBe('LeaseLost');
    g.open('after-late');
    const effects = await pool.query(`SELECT run FROM ${queue.schema}.effects`);
    expect(effects.rows).toEqual([{ run: 'next' }]);
    expect(await rows(queue)).toEqual([]);
  });

  it('the signal option stops the worker', async () => {
    const queue = await freshQueue();
    const ac = new AbortController();
    const worker = queue.work({ work: () => {} }, { signal: ac.signal });
    ac.abort();
    await worker.done;
    expect(worker.active).toBe(0);
  });

  it('a handler past handlerTimeout is aborted and its attempt fails with the timeout, whatever it throws on its abort', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }, { maxAttempts: 1 }))._unsafeUnwrap();
    const rec = recorder();
    // The handler honours its signal: it rejects with its own error, which is not what the job records.
    const worker = queue.work(
      {
        work: (_job, { signal }) =>
          new Promise((_resolve, reject) =>
            signal.addEventListener('abort', () => reject(new Error('aborted by the HTTP client')), {
              once: true,
            }),
          ),
      },
      { handlerTimeout: 30, hooks: rec.hooks },
    );
    await rec.ended(1);
    await worker.stop();
    expect(rec.ends[0]?.outcome).toBe('dead');
    expect(rec.ends[0]?.error).toMatchObject({ name: 'HandlerTimeout' });
    const [r] = await rows(queue);
    expect(r).toMatchObject({ id: job.id, state: 'dead', attempts: 1 });
    expect(r?.last_error).toMatch(/HandlerTimeout: handler timed out after 30 ms/);
  });

  it('a handler past handlerTimeout that never returns holds its job until the worker stops; stop leaves the job to its lease', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    const worker = queue.work(
      {
        work: (_job, { signal }) => {
          signal.addEventListener('abort', () => void g.at('aborted'), { once: true });
          return new Promise(() => {});
        },
      },
      { concurrency: 1, handlerTimeout: 30, graceMs: 20, hooks: rec.hooks },
    );
    await g.reached('aborted');
    expect(worker.active).toBe(1);
    await worker.stop();
    expect(rec.ends.map((e) => e.outcome)).toEqual(['unsettled']);
    expect(worker.counters).toMatchObject({ started: 1, failed: 0, released: 0, unsettled: 1 });
    // Neither failed nor given back while its handler may still run: the reaper gives it back once the
    // lease lapses.
    expect((await queue.claim({ lease: '1m' }))._unsafeUnwrap()).toEqual([]);
    expect(await rows(queue)).toEqual([{ id: job.id, state: 'running', attempts: 1, last_error: null }]);
  });

  it('handlerTimeout and ctx.transaction: a completion committed before the timeout stays; one after it is refused or rolled back (LeaseLost, caused by the timeout)', async () => {
    const queue = await freshQueue();
    await pool.query(`CREATE TABLE ${queue.schema}.effects (n int PRIMARY KEY)`);
    const before = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const across = (await queue.enqueue(pool, 'work', { n: 2 }, { maxAttempts: 1 }))._unsafeUnwrap();
    const after = (await queue.enqueue(pool, 'work', { n: 3 }, { maxAttempts: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    const results = new Map<number, { kind: string; cause?: unknown; ranFn: boolean }>();
    const insert = (tx: { query: (sql: string, values: unknown[]) => Promise<unknown> }, n: number) =>
      tx.query(`INSERT INTO ${queue.schema}.effects VALUES ($1)`, [n]);
    const worker = queue.work(
      {
        work: async (job, ctx) => {
          const n = job.payload.n;
          ctx.signal.addEventListener('abort', () => void g.at(`aborted ${n}`), { once: true });
          let ranFn = false;
          if (n === 3) await g.at('late');
          const r = await ctx.transaction(async (tx) => {
            ranFn = true;
            await insert(tx, n);
            if (n === 2) await g.at('inside');
          });
          results.set(
            n,
            r.isErr() ? { kind: r.error.kind, cause: r.error.cause, ranFn } : { kind: 'ok', ranFn },
          );
          // Ignores its signal past the timeout.
          await g.at('return');
        },
      },
      // A timeout job 1's transaction ends well within; jobs 2 and 3 wait for it at their gates.
      { concurrency: 3, handlerTimeout: 1000, hooks: rec.hooks },
    );
    await Promise.all([g.reached('aborted 1'), g.reached('aborted 2'), g.reached('aborted 3')]);
    g.open('inside');
    g.open('late');
    await g.reached('return', 3);
    g.open('return');
    await rec.ended(3);
    await worker.stop();
    const byId = new Map(rec.ends.map((e) => [e.job.id, e]));
    // Committed (with its completion) before the timeout: the job is completed, as it was.
    expect(results.get(1)).toEqual({ kind: 'ok', ranFn: true });
    expect(byId.get(before.id)).toMatchObject({ outcome: 'completed' });
    // Open across the timeout: rolled back, the completion never sent.
    expect(results.get(2)).toMatchObject({
      kind: 'LeaseLost',
      cause: { name: 'HandlerTimeout' },
      ranFn: true,
    });
    expect(byId.get(across.id)).toMatchObject({ outcome: 'dead', error: { name: 'HandlerTimeout' } });
    // Begun after the timeout: refused before BEGIN, its callback never run.
    expect(results.get(3)).toMatchObject({
      kind: 'LeaseLost',
      cause: { name: 'HandlerTimeout' },
      ranFn: false,
    });
    expect(byId.get(after.id)).toMatchObject({ outcome: 'dead', error: { name: 'HandlerTimeout' } });
    const effects = await pool.query(`SELECT n FROM ${queue.schema}.effects ORDER BY n`);
    expect(effects.rows).toEqual([{ n: 1 }]);
    expect((await rows(queue)).map((r) => [r.id, r.state])).toEqual([
      [across.id, 'dead'],
      [after.id, 'dead'],
    ]);
  });

  it('a handler past handlerTimeout that ignores its signal keeps its job: no second run starts while the first is in progress, and the attempt fails with the timeout once it returns', {
    timeout: 30_000,
  }, async () => {
    const queue = await freshQueue(); // backoff 0: a failed attempt is claimable again at once
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    let starts = 0;
    let inFlight = 0;
    let overlaps = 0;
    // The handler awaits a call that takes no signal (held by the gate): the timeout's abort changes nothing.
    const worker = queue.work(
      {
        work: async (_job, { signal }) => {
          const run = ++starts;
          if (++inFlight > 1) overlaps++;
          signal.addEventListener('abort', () => void g.at(`aborted ${run}`), { once: true });
          try {
            await g.at('third-party call');
          } finally {
            inFlight--;
          }
          return 'done anyway';
        },
      },
      { concurrency: 2, handlerTimeout: 50, lease: '5s', pollInterval: 20, hooks: rec.hooks },
    );
    try {
      await g.reached('aborted 1');
      const claimedAt = await pool.query(`SELECT lease_expires_at FROM ${queue.schema}.jobs WHERE id = $1`, [
        job.id,
      ]);
      const first = claimedAt.rows[0].lease_expires_at.getTime();
      // Either a second run of the job starts (a free slot here, the job claimable again), or the
      // heartbeat extends the first attempt's lease: the job is still this run's.
      const next = await Promise.race([
        g.reached('third-party call', 2).then(() => 'second start' as const),
        eventually(async () => {
          const r = await pool.query(
            `SELECT state, attempts, lease_expires_at FROM ${queue.schema}.jobs WHERE id = $1`,
            [job.id],
          );
          const row = r.rows[0];
          return row?.state === 'running' && row.attempts === 1 && row.lease_expires_at.getTime() > first;
        }).then(() => 'lease extended' as const),
      ]);
      expect(next).toBe('lease extended');
      expect({ starts, inFlight, overlaps }).toEqual({ starts: 1, inFlight: 1, overlaps: 0 });
      // Another claimer right now gets nothing: the job is not pending.
      expect((await queue.claim({ lease: '1m' }))._unsafeUnwrap()).toEqual([]);
      expect(await rows(queue)).toEqual([{ id: job.id, state: 'running', attempts: 1, last_error: null }]);
      expect(rec.ends).toEqual([]);
      expect(worker.active).toBe(1);
      // It returns (a value: it timed out all the same): the attempt fails with the timeout, and only then is
      // the job run again.
      g.open('third-party call');
      await rec.ended(2);
    } finally {
      g.open('third-party call');
      await worker.stop();
    }
    expect(rec.ends.map((e) => e.outcome)).toEqual(['failed', 'completed']);
    expect(rec.ends[0]?.error).toMatchObject({
      name: 'HandlerTimeout',
      message: 'handler timed out after 50 ms',
    });
    expect(rec.ends[1]?.job).toMatchObject({ id: job.id, attempts: 2 });
    expect({ starts, overlaps }).toEqual({ starts: 2, overlaps: 0 });
    expect(worker.counters).toMatchObject({ started: 2, failed: 1, completed: 1 });
  });

  it('ctx.transaction commits the handler effects together with the completion (exactly once)', async () => {
    const queue = await freshQueue();
    await pool.query(`CREATE TABLE ${queue.schema}.effects (n int PRIMARY KEY)`);
    (
      await queue.enqueueMany(
        pool,
        'work',
        Array.from({ length: 50 }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    const rec = recorder();
    const worker = queue.work(
      {
        work: async (job, ctx) => {
          const r = await ctx.transaction((tx) =>
            tx.query(`INSERT INTO ${queue.schema}.effects VALUES ($1)`, [job.payload.n]),
          );
          if (r.isErr()) throw r.error;
        },
      },
      { concurrency: 4, hooks: rec.hooks },
    );
    await rec.ended(50);
    await worker.stop();
    expect(rec.ends.every((e) => e.outcome === 'completed')).toBe(true);
    const effects = await pool.query(`SELECT count(*)::int AS n FROM ${queue.schema}.effects`);
    expect(effects.rows[0].n).toBe(50);
    expect(await rows(queue)).toEqual([]);
  });

  it('ctx.transaction rolls the effects back with LeaseLost when the lease was lost meanwhile', async () => {
    const queue = await freshQueue();
    await pool.query(`CREATE TABLE ${queue.schema}.effects (n int PRIMARY KEY)`);
    const job = (await queue.enqueue(pool, 'work', { n: 7 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    let txKind: string | undefined;
    const worker = queue.work(
      {
        work: async (j, ctx) => {
          await g.at('before-tx');
          const r = await ctx.transaction((tx) =>
            tx.query(`INSERT INTO ${queue.schema}.effects VALUES ($1)`, [j.payload.n]),
          );
          txKind = r.isErr() ? r.error.kind : 'ok';
        },
      },
      // listen: false — over LISTEN the cancel would abort the run at once (queue-cancel.test.ts); here
      // the handler goes on to its transaction, which must find the lease lost.
      { concurrency: 1, listen: false, hooks: rec.hooks },
    );
    await g.reached('before-tx');
    (await queue.cancel(job.id))._unsafeUnwrap(); // someone else takes the job away
    g.open('before-tx');
    await rec.ended(1);
    await worker.stop();
    expect(txKind).toBe('LeaseLost');
    expect(rec.ends[0]?.outcome).toBe('lost');
    const effects = await pool.query(`SELECT count(*)::int AS n FROM ${queue.schema}.effects`);
    expect(effects.rows[0].n).toBe(0);
  });

  it('extends the lease of a long handler (heartbeat) so the reaper leaves it alone', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    const worker = queue.work(
      { work: () => g.at('hold') },
      { lease: '5s', reapInterval: 50, hooks: rec.hooks },
    );
    await g.reached('hold');
    const first = await pool.query(`SELECT lease_expires_at FROM ${queue.schema}.jobs WHERE id = $1`, [
      job.id,
    ]);
    // Wait for two heartbeats (each moves the expiry), reaping all the while.
    let extensions = 0;
    let last = first.rows[0].lease_expires_at.getTime();
    await eventually(async () => {
      (await queue.reap())._unsafeUnwrap();
      const r = await pool.query(`SELECT state, lease_expires_at FROM ${queue.schema}.jobs WHERE id = $1`, [
        job.id,
      ]);
      expect(r.rows[0].state).toBe('running');
      const at = r.rows[0].lease_expires_at.getTime();
      if (at > last) {
        extensions++;
        last = at;
      }
      return extensions >= 2;
    });
    g.open('hold');
    await rec.ended(1);
    await worker.stop();
    expect(rec.ends[0]?.outcome).toBe('completed');
  });

  it('aborts a handler whose lease the heartbeat finds lost', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = recorder();
    let reason: unknown;
    const worker = queue.work(
      {
        work: async (_j, { signal }) => {
          await g.at('running');
          await new Promise<void>((resolve) =>
            signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true }),
          );
          reason = signal.reason;
        },
      },
      // listen: false — the heartbeat, not the cancel channel, must be what finds the lease lost.
      { lease: '5s', listen: false, hooks: rec.hooks },
    );
    g.open('running');
    await g.reached('running');
    (await queue.cancel(job.id))._unsafeUnwrap();
    await rec.ended(1);
    await worker.stop();
    expect(rec.ends[0]?.outcome).toBe('lost');
    expect((reason as { kind?: string }).kind).toBe('LeaseLost');
  });

  it('keeps working after its LISTEN connection is terminated (reconnects; polling covers the gap)', async () => {
    const queue = await freshQueue(true);
    const rec = recorder();
    const worker = queue.work({ work: () => {} }, { pollInterval: 60_000, hooks: rec.hooks });
    await eventually(() => worker.listening);
    await pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1 AND datname = current_database()`,
      [`LISTEN "${queue.channel}"`],
    );
    await eventually(() => rec.errors.some((e) => e.phase === 'listen'));
    await eventually(() => worker.listening);
    (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    await rec.ended(1); // pollInterval is a minute: only the new LISTEN connection can have woken it
    await worker.stop();
    expect(rec.ends[0]?.outcome).toBe('completed');
  });

  it('LISTEN wake-up vs poll-only: enqueue → handler start latency (reported, not asserted)', async () => {
    const measure = async (listen: boolean) => {
      const queue = await freshQueue(true);
      const rec = recorder();
      const worker = queue.work(
        { work: () => {} },
        { listen, pollInterval: listen ? 60_000 : 100, hooks: rec.hooks },
      );
      if (listen) await eventually(() => worker.listening);
      const latencies: number[] = [];
      for (let i = 0; i < 25; i++) {
        const t0 = performance.now();
        (await queue.enqueue(pool, 'work', { n: i }))._unsafeUnwrap();
        await rec.ended(i + 1);
        latencies.push((rec.starts[i]?.at ?? Number.NaN) - t0);
      }
      await worker.stop();
      latencies.sort((a, b) => a - b);
      return { p50: latencies[12] ?? Number.NaN, max: latencies[24] ?? Number.NaN };
    };
    const listen = await measure(true);
    const poll = await measure(false);
    console.log(
      `queue wake-up latency (25 jobs): LISTEN p50 ${listen.p50.toFixed(1)} ms max ${listen.max.toFixed(1)} ms; ` +
        `poll-only (100 ms) p50 ${poll.p50.toFixed(1)} ms max ${poll.max.toFixed(1)} ms`,
    );
    expect(Number.isFinite(listen.p50) && Number.isFinite(poll.p50)).toBe(true);
  });

  it('refuses invalid worker options (InvalidOptions) before touching the database', async () => {
    const queue = await freshQueue();
    expect(() => queue.work({ work: () => {} }, { concurrency: 0 })).toThrowError(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
  });
});

describe('stop() and the statements its timers started', () => {
  it('a reap under way when stop() is called holds stop() until it ends: once stop() resolves, no client of the pool is checked out', {
    timeout: 30_000,
  }, async () => {
    // The worker's own pool (the README's setup), so that its clients alone are counted.
    const own = new pg.Pool({ connectionString: url });
    try {
      const queue = new Queue({
        pool: own,
        txManager: new TxManager(own),
        schema: `q_worker_${++seq}`,
        tasks,
      });
      (await queue.migrate())._unsafeUnwrap();
      // A running job of group g whose lease has expired: the reap frees g's slot, under g's row lock.
      (await queue.enqueue(own, 'work', { n: 1 }, { group: 'g' }))._unsafeUnwrap();
      expect((await queue.claim({ lease: '1m' }))._unsafeUnwrap()).toHaveLength(1);
      await own.query(`UPDATE ${queue.schema}.jobs SET lease_expires_at = now() - interval '1 s'`);
      // Another session holds g's row: the reap waits for it, holding one of the worker's clients.
      const blocker = await pool.connect();
      try {
        await blocker.query('BEGIN');
        await blocker.query(`SELECT 1 FROM ${queue.schema}.job_groups WHERE key = 'g' FOR UPDATE`);
        const worker = queue.work({ work: () => {} }, { listen: false, reapInterval: 20, graceMs: 10_000 });
        await eventually(async () => {
          const r = await pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%reaped%'`,
          );
          return r.rows[0]?.n === 1;
        });
        let checkedOutAtStop: number | undefined;
        const stopping = worker.stop().then(() => {
          checkedOutAtStop = own.totalCount - own.idleCount;
        });
        // The claim loop ends; the blocked reap keeps its client, and stop() waits for it.
        await eventually(() => own.totalCount - own.idleCount === 1 && own.waitingCount === 0);
        expect(checkedOutAtStop).toBeUndefined();
        await blocker.query('COMMIT');
        await stopping;
        expect(checkedOutAtStop).toBe(0);
        expect((await own.query(`SELECT state FROM ${queue.schema}.jobs`)).rows).toEqual([
          { state: 'pending' },
        ]);
      } finally {
        await blocker.query('ROLLBACK').catch(() => {});
        blocker.release();
      }
    } finally {
      await own.end();
    }
  });
});
