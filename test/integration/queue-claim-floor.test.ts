// The claim while another session holds the MVCC horizon back (a REPEATABLE READ snapshot left open):
// claiming a job leaves its entry in jobs_claimable, and nothing can remove or mark it while the
// snapshot is held, so a claim that reads the index from its front walks every job claimed since. The
// property: the claim's cost (shared buffers, from EXPLAIN (ANALYZE, BUFFERS) of the worker's own claim
// statement) stays bounded as the jobs claimed grow. Naive control: the same store sweeping at every
// claim (the claim from the front, as before the floor), whose cost grows with the jobs claimed.
// Counts, not times: the floor's clock is the test's.
import { describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { ClaimFloor } from '../../src/queue/store/claim-floor.js';
import { JobStatements } from '../../src/queue/store/job-statements.js';
import { queueStatements } from '../../src/queue/store/queue-sql.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { explainBuffers } from './explain-buffers.js';
import { useHorizonHolder } from './hold-horizon.js';

const { pool } = await useTestDatabase();
const tasks = { work: z.object({}) };
const TASKS = ['work'];
let seq = 0;

/**
 * A migrated queue, and a store on it whose floor runs on `clock`; with `limits` (the jsonb of
 * limitsDeclaration), the store's claim is the limited claim.
 */
async function storeOn(floor: { clock: () => number }, limits?: string, groups = 0) {
  const schema = `q_floor_${++seq}`;
  const queue = new Queue({ pool, txManager: new TxManager(pool), schema, tasks });
  (await queue.migrate())._unsafeUnwrap();
  const sql = queueStatements(schema, {
    archive: false,
    channel: queue.channel,
    cancelChannel: queue.cancelChannel,
  });
  const claimFloor = new ClaimFloor(floor);
  const store = new JobStatements({ pool, sql, limits, takesOver: false, floor: claimFloor });
  return { schema, sql, store, claimFloor, limits, groups };
}

type Setup = Awaited<ReturnType<typeof storeOn>>;

/**
 * Enqueues `count` jobs from SQL (in `s.groups` groups, job i in group g<i % groups>; none with 0), their run_at an hour ago plus `first`, `first + 1`, … ms (claim order
 * is enqueue order, whatever the machine's speed).
 */
async function enqueue(s: Setup, first: number, count: number, priority = 0) {
  const r = await pool.query<{ id: string }>(
    `SELECT ${s.schema}.enqueue('work', '{}'::jsonb, priority => $3::int,
       group_key => CASE WHEN $4::int > 0 THEN 'g' || (g % $4::int) END,
       run_at => date_trunc('hour', now()) - interval '1 hour' + ($1::int + g) * interval '1 ms')::text AS id
       FROM generate_series(0, $2::int - 1) g`,
    [first, count, priority, s.groups],
  );
  return r.rows.map((row) => row.id);
}

/** Claims up to `batch` jobs through the store, completes them, and returns their ids in order. */
async function claimAndComplete(s: Setup, batch: number) {
  const claimed = (await s.store.claimBatch({ batch, lease: 60_000, tasks: TASKS }))._unsafeUnwrap().jobs;
  const done = (await s.store.completeClaimed(claimed))._unsafeUnwrap();
  expect(done.completed).toHaveLength(claimed.length);
  return claimed.map((j) => j.id);
}

/**
 * The shared buffers (hit + read) of the store's own claim statement, run under EXPLAIN (ANALYZE,
 * BUFFERS) with the parameters the store would send next, on a queue whose ready jobs are all claimed:
 * what a claim reads to find out, every entry it walks. On one connection, after six claims of none
 * there: their catalog reads and the plans the connection caches are not the claim's cost.
 */
async function claimBuffers(s: Setup, batch: number) {
  const from = s.claimFloor.start(TASKS);
  const params = s.limits === undefined ? [batch, 60_000, TASKS] : [batch, 60_000, TASKS, s.limits];
  const [text, values] =
    from === undefined
      ? [s.limits === undefined ? s.sql.claim : s.sql.claimLimited, params]
      : [s.limits === undefined ? s.sql.claimMeasured : s.sql.claimLimitedMeasured, [...params, ...from]];
  const client = await pool.connect();
  try {
    const explain = (n: number) => explainBuffers(client, text, [n, ...values.slice(1)]);
    for (let i = 0; i < 6; i++) await explain(0);
    return await explain(batch);
  } finally {
    client.release();
  }
}

/** Holds the MVCC horizon back: a REPEATABLE READ transaction that has taken its snapshot. */
const holdHorizon = useHorizonHolder(pool);

const BATCH = 100;
const ROUNDS = 50; // 5,000 jobs claimed and completed

/**
 * Runs the scenario: the horizon held, ROUNDS batches enqueued, claimed and completed by the store; the
 * claim's buffers measured after the 2nd round (200 jobs claimed) and after the last (5,000).
 * `sweepNext` moves the floor's clock so that the claim after the 21st round is a sweep.
 */
async function scenario(s: Setup, sweepNext: () => void) {
  await holdHorizon();
  let early = 0;
  for (let round = 0; round < ROUNDS; round++) {
    await enqueue(s, round * BATCH, BATCH);
    expect(await claimAndComplete(s, BATCH)).toHaveLength(BATCH);
    if (round === 1) early = await claimBuffers(s, BATCH);
    if (round === 20) sweepNext();
  }
  const late = await claimBuffers(s, BATCH);
  return { early, late };
}

/**
 * The property, after 4,800 more jobs claimed. PostgreSQL 18 starts the index scan at the floor (skip scan
 * over the priorities): the claim reads what it read before. Before 18 the floor is checked on each index
 * tuple as it is read: the entries behind it are still read from the index's leaf pages (hundreds to a
 * page) but no heap page is visited for them: at most one more buffer per 100 jobs claimed, per walk of
 * the index (`walks`: a limited claim that finds too little walks it twice, its head window and the
 * search for where that window ended).
 */
function bounded(early: number, late: number, walks = 1): boolean {
  return inject('pgMajor') >= 18 ? late <= 2 * early + 8 : late <= early + (walks * 4_800) / 100;
}

describe('the claim while a snapshot holds the horizon back', () => {
  it('costs no more after 5,000 jobs claimed than after 200 (the claim floor)', async () => {
    let now = 0;
    const s = await storeOn({ clock: () => now });
    const { early, late } = await scenario(s, () => {
      now += 3_600_000;
    });
    // Measured: PostgreSQL 18, 5 after 200 jobs claimed and 7 after 5,000; 14 and 17, 12 and 36. The
    // naive control below: 5 → 146 (18), 12 → 153 (14, 17).
    expect({ early, late, bounded: bounded(early, late) }).toMatchObject({ bounded: true });
  });

  it('naive control: sweeping at every claim, the cost grows with the jobs claimed', async () => {
    // A clock that jumps an hour at every reading: every claim is a sweep.
    let now = 0;
    const s = await storeOn({ clock: () => (now += 3_600_000) });
    const { early, late } = await scenario(s, () => {});
    expect({ early, late, bounded: bounded(early, late) }).toMatchObject({ bounded: false });
    expect(late).toBeGreaterThan(10 * early);
  });
});

/**
 * Holds the horizon and claims 2,000 jobs, then moves the clock an hour: the sweep that follows reads
 * more entries than it takes, and puts the floor in use.
 */
async function floorInUse(s: Setup, clock: { t: number }) {
  await holdHorizon();
  for (let round = 0; round < 20; round++) {
    await enqueue(s, round * BATCH, BATCH);
    await claimAndComplete(s, BATCH);
  }
  clock.t += 3_600_000;
  await enqueue(s, 20 * BATCH, BATCH);
  await claimAndComplete(s, BATCH);
  expect(s.claimFloor.start(TASKS)?.[0]).toBeGreaterThan(Number.NEGATIVE_INFINITY);
}

describe('what the floor leaves behind, and who takes it', () => {
  it('a job enqueued below the floor waits for the next sweep, which takes it first', async () => {
    const clock = { t: 0 };
    const s = await storeOn({ clock: () => clock.t });
    await floorInUse(s, clock);
    // Below the floor: a run_at older than every job claimed (as from a transaction that started
    // long before, or an explicit run_at in the past).
    const [straggler] = await enqueue(s, -10, 1);
    const after = await enqueue(s, 10_000, 3);
    expect(await claimAndComplete(s, 10)).toEqual(after);
    expect(await claimAndComplete(s, 10)).toEqual([]);
    clock.t += 1_000;
    expect(await claimAndComplete(s, 10)).toEqual([straggler]);
  });

  it('a claim that stopped in a better priority does not move the floor past a later priority', async () => {
    const clock = { t: 0 };
    const s = await storeOn({ clock: () => clock.t });
    await floorInUse(s, clock);
    // Priority 5 waits with older run_at than the priority 0 jobs claimed first.
    const later = await enqueue(s, 10_000, 3, 5);
    const better = await enqueue(s, 20_000, 4, 0);
    expect(await claimAndComplete(s, 4)).toEqual(better);
    expect(await claimAndComplete(s, 10)).toEqual(later);
  });

  it('a better priority enqueued after the floor moved is claimed first', async () => {
    const clock = { t: 0 };
    const s = await storeOn({ clock: () => clock.t });
    await floorInUse(s, clock);
    const normal = await enqueue(s, 10_000, 3, 0);
    const urgent = await enqueue(s, 10_001, 2, -1);
    expect(await claimAndComplete(s, 10)).toEqual([...urgent, ...normal]);
  });

  it('without a held snapshot the floor is never used: every claim is in claim order', async () => {
    const clock = { t: 0 };
    const s = await storeOn({ clock: () => clock.t });
    for (let round = 0; round < 20; round++) {
      await enqueue(s, round * BATCH, BATCH);
      await claimAndComplete(s, BATCH);
      clock.t += 1_000; // every claim a sweep, measured
    }
    expect(s.claimFloor.start(TASKS)).toEqual([Number.NEGATIVE_INFINITY, '0']);
    clock.t -= 1;
    expect(s.claimFloor.start(TASKS)).toBeUndefined();
    const [old] = await enqueue(s, -10, 1);
    expect(await claimAndComplete(s, 10)).toEqual([old]);
  });
});

/**
 * The limited claim (a queue with groups or rates, claim_jobs_limited): concurrency limits only (its
 * lean path) and with a group rate (its full path, which also reads the rate windows for its wait). Ten
 * groups, room for every job of a round.
 */
const LIMITED = {
  'group concurrency': JSON.stringify({ default: { concurrency: 20 }, groups: {}, tasks: {} }),
  'group rate': JSON.stringify({
    default: { concurrency: 20, rate: { limit: 1_000, perMs: 1 } },
    groups: {},
    tasks: {},
  }),
};

describe.each(Object.entries(LIMITED))(
  'the limited claim (%s) while a snapshot holds the horizon back',
  (_, limits) => {
    it('costs no more after 5,000 jobs claimed than after 200 (the claim floor)', async () => {
      let now = 0;
      const s = await storeOn({ clock: () => now }, limits, 10);
      const { early, late } = await scenario(s, () => {
        now += 3_600_000;
      });
      // Measured: PostgreSQL 18, 13 to 16 shared buffers after 200 jobs claimed and 14 after 5,000; 14,
      // 13 to 16 and 58. The naive control below (the claim of migration 0011, from the front): 13 → 292
      // (18 and 14).
      expect({ early, late, bounded: bounded(early, late, 2) }).toMatchObject({ bounded: true });
    });

    it('naive control: sweeping at every claim, the cost grows with the jobs claimed', async () => {
      let now = 0;
      const s = await storeOn({ clock: () => (now += 3_600_000) }, limits, 10);
      const { early, late } = await scenario(s, () => {});
      expect({ early, late, bounded: bounded(early, late, 2) }).toMatchObject({ bounded: false });
      expect(late).toBeGreaterThan(10 * early);
    });
  },
);

describe('the limited claim leaves the floor below the jobs their limits hold back', () => {
  it('a job its group has no room for stays above the floor, and is claimed once the group has room', async () => {
    const clock = { t: 0 };
    const s = await storeOn(
      { clock: () => clock.t },
      JSON.stringify({ default: { concurrency: 1 }, groups: {}, tasks: {} }),
    );
    await floorInUse(s, clock);
    const held = await enqueue({ ...s, groups: 1 }, 10_000, 2);
    const after = await enqueue(s, 10_010, 3);
    const first = (await s.store.claimBatch({ batch: 10, lease: 60_000, tasks: TASKS }))._unsafeUnwrap().jobs;
    expect(first.map((j) => j.id)).toEqual([held[0], ...after]);
    expect((await s.store.completeClaimed(first))._unsafeUnwrap().completed).toHaveLength(4);
    // Not a sweep (the clock has not moved): from the floor, which did not pass the job held back.
    expect(s.claimFloor.start(TASKS)?.[0]).toBeGreaterThan(Number.NEGATIVE_INFINITY);
    expect(await claimAndComplete(s, 10)).toEqual([held[1]]);
  });

  it('a job its group rate holds back keeps giving the wait, from the floor', async () => {
    const clock = { t: 0 };
    const rated = { default: { rate: { limit: 1, perMs: 60_000 } }, groups: {}, tasks: {} };
    const s = await storeOn({ clock: () => clock.t }, JSON.stringify(rated));
    await floorInUse(s, clock);
    const held = await enqueue({ ...s, groups: 1 }, 10_000, 2);
    const claim = async () =>
      (await s.store.claimBatch({ batch: 10, lease: 60_000, tasks: TASKS }))._unsafeUnwrap();
    const first = await claim();
    expect(first.jobs.map((j) => j.id)).toEqual([held[0]]);
    expect(first.waitMs).toBeGreaterThan(0);
    const second = await claim();
    expect(s.claimFloor.start(TASKS)?.[0]).toBeGreaterThan(Number.NEGATIVE_INFINITY);
    expect(second.jobs).toEqual([]);
    // The rate window that holds the job back is still seen: the worker sleeps until it frees a place.
    expect(second.waitMs).toBeGreaterThan(0);
  });
});

describe('the limited claim whose head window was full', () => {
  it('does not move the floor past a ready job of a later priority below the window', async () => {
    const clock = { t: 0 };
    const serial = JSON.stringify({ default: { concurrency: 1 }, groups: {}, tasks: {} });
    const s = await storeOn({ clock: () => clock.t }, serial);
    await floorInUse(s, clock);
    const later = await enqueue(s, 10_000, 3, 5);
    // 40 jobs of one serial group in priority 0, after them by run_at: a claim of 1 reads a window of 34
    // of them (2 × 1 + 32), takes the first and leaves the rest for the group's limit.
    const serialJobs = await enqueue({ ...s, groups: 1 }, 20_000, 40);
    const first = (await s.store.claimBatch({ batch: 1, lease: 60_000, tasks: TASKS }))._unsafeUnwrap().jobs;
    expect(first.map((j) => j.id)).toEqual([serialJobs[0]]);
    // Not a sweep: from the floor, which stayed below the later priority's jobs.
    expect(await claimAndComplete(s, 10)).toEqual(later);
  });
});

describe('the limited claim without a held snapshot', () => {
  it('a claim that searched past a window of jobs over their limits leaves the floor unused', async () => {
    const clock = { t: 0 };
    const serial = JSON.stringify({ default: { concurrency: 1 }, groups: {}, tasks: {} });
    const s = await storeOn({ clock: () => clock.t }, serial, 1);
    // 1,100 jobs of one serial group: more than the head window of a claim of 500 (1,032 entries), so the
    // claim takes one job, searches where the window ended and reads a second window (pass 1): about
    // 3,100 live entries read, none left behind.
    await enqueue(s, 0, 1_100);
    const claimed = (await s.store.claimBatch({ batch: 500, lease: 60_000, tasks: TASKS }))._unsafeUnwrap()
      .jobs;
    expect(claimed).toHaveLength(1);
    expect(s.claimFloor.start(TASKS)).toBeUndefined();
  });
});

describe('the limited claim searching group by group while a snapshot holds the horizon back', () => {
  /**
   * Ten serial groups whose `count` jobs are claimed and completed (one per group and claim) with the
   * horizon held, then a head of 100 ready jobs (run_at now(), above the floor) of a serial group that
   * has one running: a claim of 10 finds its head window full of jobs over their limit and searches the
   * ten groups one by one (pass 1), each from where the floor lets it start. Its shared buffers, as
   * claimBuffers measures them.
   */
  async function searchBuffers(s: Setup, count: number, clock: { t: number }) {
    for (let done = 0; done < count; done += 100) {
      clock.t += 1_000; // the round's first claim is a sweep
      await enqueue(s, done, 100);
      for (let left = 100; left > 0; ) left -= (await claimAndComplete(s, 100)).length;
    }
    await pool.query(
      `SELECT ${s.schema}.enqueue('work', '{}'::jsonb, group_key => 'hog') FROM generate_series(0, 100) g`,
    );
    const running = (await s.store.claimBatch({ batch: 1, lease: 60_000, tasks: TASKS }))._unsafeUnwrap()
      .jobs;
    expect(running.map((j) => j.group)).toEqual(['hog']);
    return claimBuffers(s, 10);
  }

  const serial = JSON.stringify({ default: { concurrency: 1 }, groups: {}, tasks: {} });

  it('reads at most three times after 5,000 jobs claimed what it read after 200 (the claim floor)', async () => {
    const counts: number[] = [];
    await holdHorizon();
    for (const count of [200, 5_000]) {
      const clock = { t: 0 };
      const s = await storeOn({ clock: () => clock.t }, serial, 10);
      counts.push(await searchBuffers(s, count, clock));
    }
    // Measured: 97 after 200 jobs and 136 after 5,000 (PostgreSQL 18), 96 and 215 (14: the entries
    // behind the floor read on the leaf pages); with the floor on the head window only and each group
    // searched from its front, 97 → 1,282 and 96 → 1,347; the naive control below 103 → 1,708.
    const [early = 0, late = 0] = counts;
    expect({ early, late, bounded: late <= 3 * early }).toMatchObject({ bounded: true });
  });

  it('naive control: sweeping at every claim, the cost grows with the jobs claimed', async () => {
    const counts: number[] = [];
    await holdHorizon();
    for (const count of [200, 5_000]) {
      const clock = { t: 0 };
      const s = await storeOn({ clock: () => (clock.t += 3_600_000) }, serial, 10);
      counts.push(await searchBuffers(s, count, clock));
    }
    const [early = 0, late = 0] = counts;
    expect({ early, late, bounded: late <= 3 * early }).toMatchObject({ bounded: false });
    expect(late).toBeGreaterThan(10 * early);
  });
});
