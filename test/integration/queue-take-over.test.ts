// completeAndTakeNext: a completion that takes over the group slots it frees. For each group that had k
// jobs completed, the group's next k ready jobs are leased to the caller in the same statement, and the
// group's count of running jobs is left as it was (its row is not even written). What must hold: the
// count stays equal to the running jobs, the group's claim order is kept, nothing is taken that a claim
// would not give this worker (other tasks, a better-priority job elsewhere, a group over a lowered
// limit, a rate-limited queue, a job not due yet), and a lost lease takes nothing.
import { ResultAsync } from 'neverthrow';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { type GroupsOption, type Job, Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { storeOf, takeNext } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase({ max: 10 });
const tasks = { work: z.object({ n: z.number().int() }), other: z.object({ n: z.number().int() }) };
let seq = 0;
const serial: GroupsOption = { default: { concurrency: 1 } };

/** A fresh, migrated schema and a Queue on it with `groups` (and `archive`). */
async function queueOn(groups?: GroupsOption, archive = false) {
  const schema = `q_take_over_${++seq}`;
  const q = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema,
    tasks,
    archive,
    ...(groups === undefined ? {} : { groups }),
  });
  (await q.migrate())._unsafeUnwrap();
  return {
    q,
    schema,
    again: (g: GroupsOption) => new Queue({ pool, txManager: new TxManager(pool), schema, tasks, groups: g }),
  };
}

/** The group's row: its running count, the jobs actually running, and its row version (xmin). */
async function group(schema: string, key: string) {
  const r = await pool.query<{ running: number; actual: number; version: string }>(
    `SELECT g.running, g.xmin::text AS version,
            (SELECT count(*)::int FROM ${schema}.jobs j WHERE j.group_key = g.key AND j.state = 'running') AS actual
       FROM ${schema}.job_groups g WHERE g.key = $1`,
    [key],
  );
  return r.rows[0];
}

/** Enqueues job n in group keys[n], for each n. */
async function enqueueIn(q: Queue<typeof tasks>, keys: string[]) {
  const payloads = keys.map((_, n) => ({ n }));
  (await q.enqueueMany(pool, 'work', payloads, { groups: keys }))._unsafeUnwrap();
}

const ns = (jobs: readonly Job[]) => jobs.map((j) => (j.payload as { n: number }).n);

describe('completeAndTakeNext on a queue with concurrency limits', () => {
  it("takes each freed group's next ready jobs in the group's claim order, leased to the caller, without writing the group's row", async () => {
    const { q, schema } = await queueOn({ default: { concurrency: 2 } });
    // Group g: n=1, n=2, n=3 (priority 1), then n=4 (priority 0: first in claim order).
    for (const [n, priority] of [
      [1, 1],
      [2, 1],
      [3, 1],
      [4, 0],
    ] as const)
      (await q.enqueue(pool, 'work', { n }, { group: 'g', priority }))._unsafeUnwrap();
    const first = (await q.claim({ batch: 2 }))._unsafeUnwrap();
    expect(ns(first)).toEqual([4, 1]);
    const before = await group(schema, 'g');
    expect(before).toMatchObject({ running: 2, actual: 2 });

    const r = (await takeNext(q, first, { lease: 60_000 }))._unsafeUnwrap();
    expect(r.completed.sort()).toEqual(first.map((j) => j.id).sort());
    expect(ns(r.next)).toEqual([2, 3]);
    for (const j of r.next) {
      expect(j).toMatchObject({ attempts: 1, group: 'g', task: 'work' });
      expect(j.leaseExpiresAt.getTime()).toBeGreaterThan(Date.now() + 50_000);
    }
    const after = await group(schema, 'g');
    expect(after).toMatchObject({ running: 2, actual: 2 });
    expect(after?.version).toBe(before?.version); // the group's row was not written

    // The jobs taken over are the caller's: they complete like claimed jobs; the last completion finds
    // nothing to take and gives the slots back.
    const last = (await takeNext(q, r.next))._unsafeUnwrap();
    expect(last.completed).toHaveLength(2);
    expect(last.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
  });

  it('archives the completed jobs when the queue archives', async () => {
    const { q, schema } = await queueOn(serial, true);
    (await q.enqueueMany(pool, 'work', [{ n: 1 }, { n: 2 }], { group: 'g' }))._unsafeUnwrap();
    const [job] = (await q.claim())._unsafeUnwrap();
    const r = (await takeNext(q, job ? [job] : []))._unsafeUnwrap();
    expect(ns(r.next)).toEqual([2]);
    const archived = await pool.query(`SELECT state FROM ${schema}.jobs_archive WHERE id = $1`, [job?.id]);
    expect(archived.rows).toEqual([{ state: 'done' }]);
  });

  it("takes only jobs of the caller's tasks; a group whose next job is another task's gets its slot back", async () => {
    const { q, schema } = await queueOn(serial);
    (await q.enqueue(pool, 'work', { n: 1 }, { group: 'g' }))._unsafeUnwrap();
    (await q.enqueue(pool, 'other', { n: 2 }, { group: 'g' }))._unsafeUnwrap();
    const claimed = (await q.claim({ tasks: ['work'] }))._unsafeUnwrap();
    const r = (await takeNext(q, claimed, { tasks: ['work'] }))._unsafeUnwrap();
    expect(r.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
    expect(ns((await q.claim({ tasks: ['other'] }))._unsafeUnwrap())).toEqual([2]);
  });

  it('takes nothing while a ready job of the same tasks has a better priority: the slot goes back and claims choose in claim order', async () => {
    const { q, schema } = await queueOn(serial);
    (await q.enqueueMany(pool, 'work', [{ n: 1 }, { n: 2 }], { group: 'g' }))._unsafeUnwrap();
    const claimed = (await q.claim())._unsafeUnwrap();
    (await q.enqueue(pool, 'work', { n: 3 }, { priority: -5 }))._unsafeUnwrap();
    const r = (await takeNext(q, claimed))._unsafeUnwrap();
    expect(r.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
    expect(ns((await q.claim({ batch: 2 }))._unsafeUnwrap())).toEqual([3, 2]);
  });

  it("checks each job's own priority: of two freed groups, the one whose next job has a worse priority than a ready job gets its slot back", async () => {
    const { q, schema } = await queueOn(serial);
    (await q.enqueue(pool, 'work', { n: 1 }, { group: 'x' }))._unsafeUnwrap();
    (await q.enqueue(pool, 'work', { n: 2 }, { group: 'y' }))._unsafeUnwrap();
    const claimed = (await q.claim({ batch: 2 }))._unsafeUnwrap();
    expect(ns(claimed)).toEqual([1, 2]);
    (await q.enqueue(pool, 'work', { n: 3 }, { group: 'x' }))._unsafeUnwrap();
    (await q.enqueue(pool, 'work', { n: 4 }, { group: 'y', priority: 1 }))._unsafeUnwrap();
    const r = (await takeNext(q, claimed))._unsafeUnwrap();
    // n=3 (priority 0) is the best ready job: taken over. n=4 (priority 1) is beaten by n=3, which was
    // ready when the completion began: not taken, and not left locked or leased.
    expect(ns(r.next)).toEqual([3]);
    expect(await group(schema, 'x')).toMatchObject({ running: 1, actual: 1 });
    expect(await group(schema, 'y')).toMatchObject({ running: 0, actual: 0 });
    expect(ns((await q.claim())._unsafeUnwrap())).toEqual([4]);
  });

  it('takes at most `max` in all (the room a worker has); the slots not taken over go back', async () => {
    const { q, schema } = await queueOn(serial);
    const keys = ['a', 'b', 'a', 'b'];
    await enqueueIn(q, keys);
    const claimed = (await q.claim({ batch: 2 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.group).sort()).toEqual(['a', 'b']);
    const r = (await takeNext(q, claimed, { max: 1 }))._unsafeUnwrap();
    expect(r.completed).toHaveLength(2);
    expect(r.next.map((j) => j.group)).toEqual(['a']); // the groups in key order
    expect(await group(schema, 'a')).toMatchObject({ running: 1, actual: 1 });
    expect(await group(schema, 'b')).toMatchObject({ running: 0, actual: 0 });
    // max 0: a plain completion.
    const none = (await takeNext(q, r.next, { max: 0 }))._unsafeUnwrap();
    expect(none.next).toEqual([]);
    expect(await group(schema, 'a')).toMatchObject({ running: 0, actual: 0 });
  });

  it('gives a slot back to the newest version of the group row when a claim changed it while the completion waited for its lock', async () => {
    const { q, schema } = await queueOn({ default: { concurrency: 2 } });
    await enqueueIn(q, ['g', 'g']);
    const [a] = (await q.claim({ batch: 1 }))._unsafeUnwrap();
    if (a === undefined) throw new Error('nothing claimed');
    // Another worker's claim holds the group's row: it took the second job and has not committed yet.
    const other = await pool.connect();
    try {
      await other.query('BEGIN');
      const b = await other.query(
        `SELECT (r.job).id FROM ${schema}.claim_jobs_limited(1, 30000, ARRAY['work'], $1::jsonb) AS r WHERE (r.job).id IS NOT NULL`,
        [JSON.stringify({ default: { concurrency: 2 } })],
      );
      expect(b.rows).toHaveLength(1);
      const otherPid = (await other.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      // Completing 'a' takes nothing over (the group's next job is that claim's, locked): its slot goes
      // back, under the group's row lock, which it waits for.
      const completing = takeNext(q, [a], { max: 1 });
      for (let i = 0; ; i++) {
        const r = await pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))',
          [otherPid],
        );
        if ((r.rows[0]?.n ?? 0) > 0) break;
        if (i > 2000) throw new Error('the completion never waited for the claim');
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      await other.query('COMMIT');
      const r = (await completing)._unsafeUnwrap();
      expect(r.completed).toHaveLength(1);
      expect(r.next).toEqual([]);
    } finally {
      other.release();
    }
    // The claim's increment and the completion's decrement both count: one job runs, the count says 1.
    expect(await group(schema, 'g')).toMatchObject({ running: 1, actual: 1 });
  });

  it('takes nothing not due yet', async () => {
    const { q, schema } = await queueOn(serial);
    (await q.enqueue(pool, 'work', { n: 1 }, { group: 'g' }))._unsafeUnwrap();
    (
      await q.enqueue(pool, 'work', { n: 2 }, { group: 'g', runAt: new Date(Date.now() + 3_600_000) })
    )._unsafeUnwrap();
    const r = (await takeNext(q, (await q.claim())._unsafeUnwrap()))._unsafeUnwrap();
    expect(r.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
  });

  it("checks a group with a declaration of its own against it, and against the default's when it has none", async () => {
    const { q, schema, again } = await queueOn({ default: { concurrency: 1 }, vip: { concurrency: 2 } });
    const payloads = [1, 2, 3, 4, 5].map((n) => ({ n }));
    (await q.enqueueMany(pool, 'work', payloads, { group: 'vip' }))._unsafeUnwrap();
    const [a, b] = (await q.claim({ batch: 5 }))._unsafeUnwrap();
    expect(ns([a, b].filter((j) => j !== undefined))).toEqual([1, 2]);
    const kept = (await takeNext(q, a ? [a] : []))._unsafeUnwrap();
    expect(ns(kept.next)).toEqual([3]);
    expect(await group(schema, 'vip')).toMatchObject({ running: 2, actual: 2 });
    // A declaration without vip's own limit: the default's 1 with two running, the slot goes back.
    const lowered = (await takeNext(again({ default: { concurrency: 1 } }), b ? [b] : []))._unsafeUnwrap();
    expect(lowered.next).toEqual([]);
    expect(await group(schema, 'vip')).toMatchObject({ running: 1, actual: 1 });
  });

  it("passes over the group's jobs not due yet, even ahead in its claim order, to its next ready one", async () => {
    const { q, schema } = await queueOn(serial);
    (await q.enqueue(pool, 'work', { n: 1 }, { group: 'g' }))._unsafeUnwrap();
    const claimed = (await q.claim())._unsafeUnwrap();
    const later = new Date(Date.now() + 3_600_000);
    for (const n of [2, 3])
      (await q.enqueue(pool, 'work', { n }, { group: 'g', priority: -1, runAt: later }))._unsafeUnwrap();
    (await q.enqueue(pool, 'work', { n: 4 }, { group: 'g' }))._unsafeUnwrap();
    const r = (await takeNext(q, claimed))._unsafeUnwrap();
    expect(ns(r.next)).toEqual([4]);
    expect(await group(schema, 'g')).toMatchObject({ running: 1, actual: 1 });
  });

  it('after a limit was lowered, gives slots back until the group is within it; the declaration that allows more keeps taking over (control)', async () => {
    const { q: two, schema, again } = await queueOn({ default: { concurrency: 2 } });
    const one = again(serial);
    (
      await two.enqueueMany(
        pool,
        'work',
        [1, 2, 3, 4, 5].map((n) => ({ n })),
        { group: 'g' },
      )
    )._unsafeUnwrap();
    const [a, b] = (await two.claim({ batch: 2 }))._unsafeUnwrap();
    expect(await group(schema, 'g')).toMatchObject({ running: 2, actual: 2 });
    // Declared concurrency 1, two running: the slot goes back.
    const lowered = (await takeNext(one, a ? [a] : []))._unsafeUnwrap();
    expect(lowered.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 1, actual: 1 });
    // Within the limit again: the next completion under concurrency 1 takes over.
    const within = (await takeNext(one, b ? [b] : []))._unsafeUnwrap();
    expect(ns(within.next)).toEqual([3]);
    expect(await group(schema, 'g')).toMatchObject({ running: 1, actual: 1 });
    // Control: the declaration of concurrency 2, with two running, takes over and keeps two running.
    const more = (await two.claim())._unsafeUnwrap();
    expect(ns(more)).toEqual([4]);
    const kept = (await takeNext(two, more))._unsafeUnwrap();
    expect(ns(kept.next)).toEqual([5]);
    expect(await group(schema, 'g')).toMatchObject({ running: 2, actual: 2 });
  });

  it('with a rate limit declared, takes nothing over (a rate counts claims): a plain completion', async () => {
    const { q, schema } = await queueOn({ default: { concurrency: 1, rate: { limit: 100, per: '1s' } } });
    (await q.enqueueMany(pool, 'work', [{ n: 1 }, { n: 2 }], { group: 'g' }))._unsafeUnwrap();
    const r = (await takeNext(q, (await q.claim())._unsafeUnwrap()))._unsafeUnwrap();
    expect(r.completed).toHaveLength(1);
    expect(r.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
  });

  it('without limits declared, is a plain completion', async () => {
    const { q, schema } = await queueOn();
    (await q.enqueueMany(pool, 'work', [{ n: 1 }, { n: 2 }], { group: 'g' }))._unsafeUnwrap();
    const r = (await takeNext(q, (await q.claim())._unsafeUnwrap()))._unsafeUnwrap();
    expect(r.next).toEqual([]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
  });

  it('a lost lease completes nothing and takes nothing', async () => {
    const { q, schema } = await queueOn(serial);
    (await q.enqueueMany(pool, 'work', [{ n: 1 }, { n: 2 }], { group: 'g' }))._unsafeUnwrap();
    const [job] = (await q.claim())._unsafeUnwrap();
    if (job === undefined) throw new Error('nothing claimed');
    const stale = { ...job, leaseToken: '00000000-0000-4000-8000-000000000000' };
    const r = (await takeNext(q, [stale]))._unsafeUnwrap();
    expect(r).toMatchObject({ completed: [], lost: [job.id], next: [] });
    expect(await group(schema, 'g')).toMatchObject({ running: 1, actual: 1 });
  });
});

describe('two workers taking over at once', () => {
  it('keep every counter equal to the running jobs and never take a job twice', async () => {
    const { q, schema } = await queueOn(serial);
    const keys = Array.from({ length: 200 }, (_, n) => `g${n % 20}`);
    await enqueueIn(q, keys);
    const seen = new Set<string>();
    let twice = 0;
    const loop = async () => {
      let held = (await q.claim({ batch: 8 }))._unsafeUnwrap();
      while (held.length > 0) {
        for (const j of held) {
          if (seen.has(j.id)) twice++;
          seen.add(j.id);
        }
        const r = (await takeNext(q, held))._unsafeUnwrap();
        held = [
          ...r.next,
          ...(r.next.length < 8 ? (await q.claim({ batch: 8 - r.next.length }))._unsafeUnwrap() : []),
        ];
        const running = await pool.query<{ over: number }>(
          `SELECT count(*)::int AS over FROM (SELECT 1 FROM ${schema}.jobs WHERE state = 'running'
            GROUP BY group_key HAVING count(*) > 1) x`,
        );
        expect(running.rows[0]?.over).toBe(0);
      }
    };
    await Promise.all([loop(), loop()]);
    expect(twice).toBe(0);
    expect(seen.size).toBe(200);
    const left = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.jobs`);
    expect(left.rows[0]?.n).toBe(0);
    const g = await pool.query<{ bad: number }>(
      `SELECT count(*)::int AS bad FROM ${schema}.job_groups WHERE running <> 0`,
    );
    expect(g.rows[0]?.bad).toBe(0);
  });
});

describe('a worker taking over', () => {
  it('runs the jobs it takes over, and a completion still on its way when stop() begins gives them back', async () => {
    const { q, schema } = await queueOn(serial);
    (
      await q.enqueueMany(
        pool,
        'work',
        [1, 2, 3].map((n) => ({ n })),
        { group: 'g' },
      )
    )._unsafeUnwrap();
    const ran: number[] = [];
    let hold: (() => void) | undefined;
    const held = new Promise<void>((resolve) => {
      hold = resolve;
    });
    let calls = 0;
    const store = storeOf(q);
    const original = store.completeAndTakeNext.bind(store);
    // The second completion waits until stop() has begun.
    vi.spyOn(store, 'completeAndTakeNext').mockImplementation((jobs, options) =>
      ++calls === 2
        ? ResultAsync.fromSafePromise(held).andThen(() => original(jobs, options))
        : original(jobs, options),
    );
    const worker = q.work(
      { work: (job) => void ran.push(job.payload.n) },
      { concurrency: 1, pollInterval: 50 },
    );
    await vi.waitFor(() => expect(calls).toBe(2), { timeout: 10_000 });
    expect(ran).toEqual([1, 2]); // 2 came from the first completion's take-over
    const stopped = worker.stop();
    hold?.();
    await stopped;
    // Job 3, taken over by the completion that came back after stop() began, was given back: pending,
    // its attempt not charged, its group's slot free; nothing running.
    const left = await pool.query(`SELECT state, attempts FROM ${schema}.jobs`);
    expect(left.rows).toEqual([{ state: 'pending', attempts: 0 }]);
    expect(await group(schema, 'g')).toMatchObject({ running: 0, actual: 0 });
    expect(ran).toEqual([1, 2]);
    expect(worker.counters).toMatchObject({ completed: 2, released: 1 });
  });
});
