// Rate limits per task and per group, enforced in the database across worker processes (Queue
// instances with pools of their own): at most `limit` claims in any interval of `per`, measured on the
// server's own claim times; jobs over the rate wait (pending), and workers sleep until a window frees a
// place instead of polling.
import pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { limitsDeclaration } from '../../src/queue/group-limits.js';
import { type Job, Queue, type QueueOptions } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import {
  eventually,
  mostWithin,
  recordClaims,
  storeOf,
  untilServerPasses,
} from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase({ max: 10 });
const pools: pg.Pool[] = [];
afterAll(() => Promise.all(pools.map((p) => p.end())));
const tasks = { work: z.object({ n: z.number().int() }) };
type Limits = Pick<QueueOptions<typeof tasks>, 'groups' | 'taskRates'>;
let seq = 0;
const LEASE_MS = 30_000;

function replica(schema: string, limits: Limits) {
  const own = new pg.Pool({ connectionString: url });
  pools.push(own);
  return new Queue({ pool: own, txManager: new TxManager(own), schema, tasks, lease: LEASE_MS, ...limits });
}

/** Two replicas burn down `groups` (group → job count; '' = ungrouped); returns claim times per group. */
async function burnDown(limits: Limits, groups: Record<string, number>) {
  const schema = `q_rates_${++seq}`;
  const setup = replica(schema, {});
  (await setup.migrate())._unsafeUnwrap();
  const byGroup = new Map<string, number[]>();
  const claimed = (job: Job) => {
    const g = job.group ?? '';
    byGroup.set(g, [...(byGroup.get(g) ?? []), job.leaseExpiresAt.getTime() - LEASE_MS]);
  };
  const replicas = [replica(schema, limits), replica(schema, limits)];
  const claims = replicas.map((q) => vi.spyOn(storeOf(q), 'claimBatch'));
  // A poll once a minute: only a NOTIFY or the claim's own "next window" hint can wake a worker in time.
  const workers = replicas.map((q) => q.work({ work: claimed }, { concurrency: 4, pollInterval: 60_000 }));
  await eventually(() => workers.every((w) => w.listening));
  const total = Object.values(groups).reduce((a, b) => a + b, 0);
  const list = Object.entries(groups).flatMap(([g, count]) => Array.from({ length: count }, () => g || null));
  (
    await setup.enqueueMany(
      pool,
      'work',
      list.map((_, n) => ({ n })),
      { groups: list },
    )
  )._unsafeUnwrap();
  await eventually(() => [...byGroup.values()].reduce((a, t) => a + t.length, 0) >= total, 30_000);
  await Promise.all(workers.map((w) => w.stop()));
  return { byGroup, claims: claims.reduce((a, c) => a + c.mock.calls.length, 0) };
}

describe('task rate limit', () => {
  it('never claims more than `limit` jobs of the task in any interval of `per`, across two replicas', async () => {
    const r = await burnDown({ taskRates: { work: { limit: 4, per: 300 } } }, { '': 14 });
    const times = r.byGroup.get('') ?? [];
    expect(times).toHaveLength(14);
    expect(mostWithin(times, 300)).toBeLessThanOrEqual(4);
    // The workers slept until the next window (their poll is a minute): a bounded number of claims.
    expect(r.claims).toBeLessThan(60);
  });

  it('naive control: without the rate the same burn-down claims them all at once', async () => {
    const r = await burnDown({}, { '': 14 });
    expect(mostWithin(r.byGroup.get('') ?? [], 300)).toBeGreaterThan(4);
  });
});

describe('group rate limit', () => {
  it('limits each group on its own; ungrouped jobs are not held back', async () => {
    const r = await burnDown(
      { groups: { default: { rate: { limit: 2, per: '250ms' } } } },
      { a: 6, b: 6, '': 8 },
    );
    for (const g of ['a', 'b']) {
      expect(r.byGroup.get(g)).toHaveLength(6);
      expect(mostWithin(r.byGroup.get(g) ?? [], 250)).toBeLessThanOrEqual(2);
    }
    expect(r.byGroup.get('')).toHaveLength(8);
  });

  it('naive control: without the group rate both groups run all at once', async () => {
    const r = await burnDown({}, { a: 6, b: 6 });
    expect(mostWithin(r.byGroup.get('a') ?? [], 250)).toBeGreaterThan(2);
  });
});

describe('the guard of a rate', () => {
  // The claim counts claims in the last `per + guard`: a burn-down held by the rate puts its windows
  // `per + guard` apart, so a handler that starts a little earlier after its claim than the handler of
  // a claim `limit` claims before it still starts in another window of `per`. Counted in windows of
  // `per + guard / 2` (half the guard left for the claims' own lag: these times are each claim's start).
  const rate = { limit: 4, per: 300 };
  it("puts a saturated rate's claims `per + guard` apart", async () => {
    const r = await burnDown({ taskRates: { work: { ...rate, guard: 200 } } }, { '': 12 });
    const times = r.byGroup.get('') ?? [];
    expect(times).toHaveLength(12);
    expect(mostWithin(times, 400)).toBeLessThanOrEqual(4);
  });

  it("control: without a guard the next window's claims follow `per` after the first ones", async () => {
    const r = await burnDown({ taskRates: { work: { ...rate, guard: 0 } } }, { '': 12 });
    expect(mostWithin(r.byGroup.get('') ?? [], 400)).toBeGreaterThan(4);
  });
});

describe('the clock of a rate window', () => {
  it("is the moment the claim holds its rows, not the start of the claim's transaction", async () => {
    // A claim whose transaction started half a second before it locked its rows (here a claim inside an
    // explicit transaction; in a worker, the planning of a first claim after a restart, or a wait for a
    // pool client, in milliseconds) stamped its claims with that start: the next claim found the window
    // free half a second early, and one real-time second held twice the limit.
    const schema = `q_rates_${++seq}`;
    // No guard: this is the clock alone (the guard, which lengthens the window, is tested above).
    const taskRates = { work: { limit: 10, per: 1000, guard: 0 } };
    const queue = replica(schema, { taskRates });
    (await queue.migrate())._unsafeUnwrap();
    await recordClaims(pool, schema);
    (
      await queue.enqueueMany(
        pool,
        'work',
        Array.from({ length: 20 }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    const early = await pool.connect();
    try {
      await early.query('BEGIN');
      const t0 = (await early.query<{ t: Date }>('SELECT now() AS t')).rows[0]!.t;
      await untilServerPasses(pool, t0, 500);
      const first = await early.query(
        `SELECT count(*)::int AS n FROM ${schema}.claim_jobs_limited(10, 30000, ARRAY['work'], $1::jsonb) r WHERE (r.job).id IS NOT NULL`,
        [limitsDeclaration(undefined, taskRates)],
      );
      expect(first.rows[0].n).toBe(10);
      await early.query('COMMIT');
    } finally {
      early.release();
    }
    // The next claims, as soon as the window lets them (polled; each claim asks the server).
    await eventually(async () => (await queue.claim({ batch: 10 }))._unsafeUnwrap().length > 0, 10_000, 20);
    const at = (
      await pool.query<{ ms: number }>(`SELECT extract(epoch FROM at) * 1000 AS ms FROM ${schema}.claims`)
    ).rows.map((r) => r.ms);
    expect(at.length).toBeGreaterThan(10);
    // Claims leased within one second, on the server's clock at the moment each job was leased (less
    // 100 ms: one claim leases its rows over a few ms, more on a loaded machine; the early clock let the
    // next claim in 500 ms early).
    expect(mostWithin(at, 900)).toBeLessThanOrEqual(10);
  });
});

describe('the wait hint of a short claim', () => {
  it('names a group left out for its full window even when the window frees before the claim locks its rows', async () => {
    // The claim chooses the groups to lock with now() (the start of its statement) and computed its hint
    // with the clock it took after locking: a group whose window was full at the start and freed in
    // between was neither claimed nor named in the hint. A worker whose claim ran across that moment
    // (woken by another job's completion, or by its hint a millisecond early) claimed nothing and slept
    // its whole poll interval with the job ready; two replicas could both end that way. Here the
    // window's boundary is put just after now(), in one transaction.
    const schema = `q_rates_${++seq}`;
    const groups = { default: { rate: { limit: 2, per: 250, guard: 100 } } };
    const limits = limitsDeclaration(groups, undefined);
    const queue = replica(schema, { groups });
    (await queue.migrate())._unsafeUnwrap();
    (await queue.enqueue(pool, 'work', { n: 1 }, { group: 'a' }))._unsafeUnwrap();
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      // The window counts claims in the last per + guard: two claims at its very edge fill it until
      // one microsecond after this transaction's now().
      await client.query(
        `UPDATE ${schema}.job_groups SET rate_times = array_fill(now() - $1::float8 * interval '1 millisecond' + interval '1 microsecond', ARRAY[2]) WHERE key = 'a'`,
        [groups.default.rate.per + groups.default.rate.guard],
      );
      const t0 = (await client.query<{ t: Date }>('SELECT now() AS t')).rows[0]!.t;
      await untilServerPasses(pool, t0, 1);
      const r = await client.query<{ id: string | null; wait_ms: number | null }>(
        `SELECT (r.job).id, r.wait_ms FROM ${schema}.claim_jobs_limited(4, 30000, ARRAY['work'], $1::jsonb) r`,
        [limits],
      );
      await client.query('COMMIT');
      const jobs = r.rows.filter((x) => x.id !== null);
      const hints = r.rows.filter((x) => x.wait_ms !== null);
      // Short (the group's window was full when the claim chose its groups), so it must say when to
      // come back: the ready job waits for no poll.
      expect(jobs.length > 0 || hints.length === 1).toBe(true);
    } finally {
      client.release();
    }
  });
});

describe('a worker of a queue with rate limits', () => {
  it('claims only for its free handler slots: no job claimed ahead waits in a local queue to start later', async () => {
    const schema = `q_rates_${++seq}`;
    const setup = replica(schema, {});
    (await setup.migrate())._unsafeUnwrap();
    const queue = replica(schema, { taskRates: { work: { limit: 1000, per: '1s' } } });
    expect(queue.rated).toBe(true);
    const claims = vi.spyOn(storeOf(queue), 'claimBatch');
    const started: number[] = [];
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const worker = queue.work(
      {
        work: async (job) => {
          started.push(job.payload.n);
          await held;
        },
      },
      { concurrency: 2, prefetch: 'auto' },
    );
    try {
      (
        await setup.enqueueMany(
          pool,
          'work',
          Array.from({ length: 6 }, (_, n) => ({ n })),
        )
      )._unsafeUnwrap();
      await eventually(() => started.length === 2);
      // Both slots busy: every claim so far asked for the free slots only (a probe job, or a local
      // queue, would have held a third job claimed but not started).
      const asked = claims.mock.calls.map(([o]) => o?.batch ?? 1);
      expect(asked.length).toBeGreaterThan(0);
      expect(Math.max(...asked)).toBeLessThanOrEqual(2);
      const running = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${schema}.jobs WHERE state = 'running'`,
      );
      expect(running.rows[0]?.n).toBe(2);
    } finally {
      release();
      await eventually(() => started.length === 6);
      await worker.stop();
    }
  });
});
