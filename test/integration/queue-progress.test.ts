import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { JobEndEvent } from '../../src/queue/index.js';
import { Queue } from '../../src/queue/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { countingPool } from '../fixtures/counting-pool.js';
import { expireLeases, leaks } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
// The worker's pool records every statement sent through pool.query (the queue's own statements).
const counted = countingPool(url);
const countedTm = new TxManager(counted.pool);
afterAll(async () => {
  await counted.pool.end();
});
const tasks = { work: z.object({ n: z.number().int() }) };
let seq = 0;

async function freshQueue(options: { archive?: boolean } = {}) {
  const queue = new Queue({
    pool: counted.pool,
    txManager: countedTm,
    schema: `q_progress_${++seq}`,
    tasks,
    backoff: { baseMs: 0, capMs: 0 },
    ...options,
  });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

/** Progress statements sent since `from` (an index into the recorded texts). */
const progressWrites = (from: number) =>
  counted.texts.slice(from).filter((t) => t.includes('SET progress')).length;

function ends() {
  const all: JobEndEvent[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  return {
    all,
    hooks: {
      onJobEnd: (e: JobEndEvent) => {
        all.push(e);
        for (const w of waiters.filter((x) => all.length >= x.n)) w.resolve();
      },
    },
    ended: (n: number) =>
      new Promise<void>((resolve) => (all.length >= n ? resolve() : waiters.push({ n, resolve }))),
  };
}

afterEach(async () => {
  expect(await leaks(pool)).toEqual({ checkedOut: 0, idleInTransaction: 0 });
  expect(await leaks(counted.pool)).toEqual({ checkedOut: 0, idleInTransaction: 0 });
});

describe('ctx.progress', () => {
  it('stores the value on the job (readable with queue.job while it runs) and the last one goes to the archive', async () => {
    const queue = await freshQueue({ archive: true });
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = ends();
    const worker = queue.work(
      {
        work: async (_j, ctx) => {
          (await ctx.progress({ done: 1, total: 3 }))._unsafeUnwrap();
          await g.at('reported');
          void ctx.progress({ done: 3, total: 3 }); // not awaited: written when the handler returns
        },
      },
      { hooks: rec.hooks, progressInterval: '1h' },
    );
    await g.reached('reported');
    const running = (await queue.job(job.id))._unsafeUnwrap();
    expect(running).toMatchObject({
      id: job.id,
      state: 'running',
      progress: { done: 1, total: 3 },
      attempts: 1,
    });
    expect(running.leaseExpiresAt).toBeInstanceOf(Date);
    g.open('reported');
    await rec.ended(1);
    await worker.stop();
    expect(rec.all[0]?.outcome).toBe('completed');
    const archived = (await queue.job(job.id))._unsafeUnwrap();
    expect(archived).toMatchObject({ state: 'done', progress: { done: 3, total: 3 }, runAt: null });
    expect(archived.finishedAt).toBeInstanceOf(Date);
    expect((await queue.job('999999'))._unsafeUnwrapErr().kind).toBe('NotFound');
  });

  it('a tight loop of 1000 calls sends 2 statements (the first, and the last value at the end), not 1000', async () => {
    const queue = await freshQueue({ archive: true });
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const rec = ends();
    const from = counted.texts.length;
    const outcomes: Promise<unknown>[] = [];
    const worker = queue.work(
      {
        work: async (_j, ctx) => {
          for (let i = 1; i <= 1000; i++) outcomes.push(Promise.resolve(ctx.progress({ i })));
        },
      },
      { hooks: rec.hooks, progressInterval: '1h' },
    );
    await rec.ended(1);
    await worker.stop();
    expect(progressWrites(from)).toBe(2);
    // Every call resolved with the outcome of the write that carried its value or a newer one.
    const settled = (await Promise.all(outcomes)) as { isOk(): boolean }[];
    expect(settled.every((r) => r.isOk())).toBe(true);
    expect((await queue.job(job.id))._unsafeUnwrap().progress).toEqual({ i: 1000 });
  });

  it('control: without coalescing (interval 0, each call awaited) every call is a statement', async () => {
    const queue = await freshQueue();
    await queue.enqueue(pool, 'work', { n: 1 });
    const rec = ends();
    const from = counted.texts.length;
    const worker = queue.work(
      {
        work: async (_j, ctx) => {
          for (let i = 1; i <= 20; i++) (await ctx.progress({ i }))._unsafeUnwrap();
        },
      },
      { hooks: rec.hooks, progressInterval: 0 },
    );
    await rec.ended(1);
    await worker.stop();
    expect(progressWrites(from)).toBe(20);
  });

  it('is kept across a retry: the next attempt gets it as job.progress', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const rec = ends();
    const seen: unknown[] = [];
    const worker = queue.work(
      {
        work: async (j, ctx) => {
          seen.push(j.progress);
          if (j.attempts === 1) {
            void ctx.progress({ step: 2 });
            throw new Error('step 3 failed');
          }
        },
      },
      { hooks: rec.hooks, progressInterval: '1h' },
    );
    await rec.ended(2);
    await worker.stop();
    expect(rec.all.map((e) => e.outcome)).toEqual(['failed', 'completed']);
    expect(seen).toEqual([null, { step: 2 }]);
    expect((await queue.job(job.id))._unsafeUnwrapErr().kind).toBe('NotFound'); // done, no archive
  });

  it("is fenced by the lease: once the job is someone else's, LeaseLost, nothing written, the signal aborts", async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const g = gate();
    const rec = ends();
    let outcome: { kind?: string } | undefined;
    let reason: unknown;
    const worker = queue.work(
      {
        work: async (_j, ctx) => {
          await g.at('taken');
          const r = await ctx.progress({ late: true });
          outcome = r.isErr() ? r.error : undefined;
          reason = ctx.signal.reason;
        },
      },
      { hooks: rec.hooks, listen: false, lease: '10min' },
    );
    await g.reached('taken');
    // Another worker re-claimed the job (its lease expired and was reaped meanwhile): a new token.
    await pool.query(`UPDATE ${queue.schema}.jobs SET lease_token = gen_random_uuid() WHERE id = $1`, [
      job.id,
    ]);
    g.open('taken');
    await rec.ended(1);
    await worker.stop();
    expect(outcome?.kind).toBe('LeaseLost');
    expect((reason as { kind?: string }).kind).toBe('LeaseLost');
    expect(rec.all[0]?.outcome).toBe('lost');
    const r = await pool.query(`SELECT progress FROM ${queue.schema}.jobs WHERE id = $1`, [job.id]);
    expect(r.rows[0].progress).toBeNull();
  });

  it('queue.progress on a lost lease: LeaseLost and nothing written', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'work', { n: 1 }))._unsafeUnwrap();
    const [first] = (await queue.claim())._unsafeUnwrap();
    await expireLeases(pool, queue.schema, [job.id]);
    (await queue.reap())._unsafeUnwrap();
    const [second] = (await queue.claim())._unsafeUnwrap();
    expect((await queue.progress(first!, { stale: true }))._unsafeUnwrapErr().kind).toBe('LeaseLost');
    expect((await queue.job(job.id))._unsafeUnwrap().progress).toBeNull();
    (await queue.progress(second!, { fresh: true }))._unsafeUnwrap();
    expect((await queue.job(job.id))._unsafeUnwrap().progress).toEqual({ fresh: true });
    (await queue.complete(second!))._unsafeUnwrap();
  });

  it('refuses what is not JSON or too large: InvalidOptions at once, nothing sent', async () => {
    const queue = await freshQueue();
    await queue.enqueue(pool, 'work', { n: 1 });
    const rec = ends();
    const kinds: string[] = [];
    const from = counted.texts.length;
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    const worker = queue.work(
      {
        work: async (_j, ctx) => {
          for (const bad of [
            10n,
            undefined,
            () => 1,
            cyclic,
            'x'.repeat(9000),
            { s: 'a\u0000b' },
            '\ud800',
          ]) {
            const r = await ctx.progress(bad);
            kinds.push(
              r.isErr()
                ? `${r.error.kind}:${String((r.error as { issues?: { path: unknown[] }[] }).issues?.[0]?.path)}`
                : 'ok',
            );
          }
        },
      },
      { hooks: rec.hooks },
    );
    await rec.ended(1);
    await worker.stop();
    expect(kinds).toEqual(Array(7).fill('InvalidOptions:progress'));
    expect(progressWrites(from)).toBe(0);
    expect(rec.all[0]?.outcome).toBe('completed');
    const [claimed] = (await queue.claim())._unsafeUnwrap();
    expect(claimed).toBeUndefined();
  });
});
