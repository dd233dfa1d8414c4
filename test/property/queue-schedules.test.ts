import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { nextTick } from '../../src/queue/schedules/schedule-ticks.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { replica, serverHour, setNextRun } from '../fixtures/schedule-helpers.js';
import { useTestDatabase } from '../helpers.js';

// However many replicas pass at once, in whatever interleaving, each due tick of a schedule is fired by
// exactly one of them. The naive scheduler — read the persisted next run, enqueue, write it forward, with
// no row lock — is the same scenario without the pattern: the property catches its duplicates.

const { pool, url } = await useTestDatabase({ max: 4 });
const tasks = { ping: z.object({}) };
const schema = 'q_sched_prop';
const def = { every: '1h', task: 'ping', missed: { catchUp: 20 }, grace: '1d' } as const;
const replicas = Array.from({ length: 6 }, () =>
  replica(url, { schema, tasks, schedules: { hourly: def } }, 2),
);
afterAll(async () => {
  await Promise.all(replicas.map((r) => r.pool.end()));
});
const setup = new Queue({ pool, txManager: new TxManager(pool), schema, tasks, schedules: { hourly: def } });
(await setup.migrate())._unsafeUnwrap();
(await setup.fireSchedules())._unsafeUnwrap();
const stored = setup.declaredSchedules[0]!.definition;

/** Yields to the event loop `n` times: varies where each replica's statements fall between the others'. */
async function yields(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** NAIVE: reads next_run_at without a lock, enqueues every due tick, then moves next_run_at on. */
async function naivePass(r: (typeof replicas)[number], delay: number): Promise<Date[]> {
  const row = await r.pool.query<{ next_run_at: Date }>(
    `SELECT next_run_at FROM ${schema}.schedules WHERE name = 'hourly'`,
  );
  const now = new Date();
  const fired: Date[] = [];
  let tick = row.rows[0]?.next_run_at ?? now;
  while (tick.getTime() <= now.getTime()) {
    fired.push(tick);
    const next = nextTick(stored, tick);
    if (next === undefined) break; // an interval schedule always has a next tick
    tick = next;
  }
  await yields(delay);
  await r.pool.query(
    `INSERT INTO ${schema}.jobs (task, payload) SELECT 'ping', '{}' FROM unnest($1::timestamptz[])`,
    [fired],
  );
  await r.pool.query(`UPDATE ${schema}.schedules SET next_run_at = $1 WHERE name = 'hourly'`, [tick]);
  return fired;
}

const scenario = fc.record({
  replicas: fc.integer({ min: 2, max: 6 }),
  due: fc.integer({ min: 1, max: 8 }),
  delays: fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 6, maxLength: 6 }),
});

async function run(
  s: { replicas: number; due: number; delays: number[] },
  pass: (r: (typeof replicas)[number], delay: number) => Promise<Date[]>,
) {
  await pool.query(`DELETE FROM ${schema}.jobs`);
  await setNextRun(pool, schema, 'hourly', await serverHour(pool, s.due - 1));
  const fired = (
    await Promise.all(replicas.slice(0, s.replicas).map((r, i) => pass(r, s.delays[i] ?? 0)))
  ).flat();
  const jobs = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.jobs`);
  return {
    fired: fired.length,
    distinct: new Set(fired.map((t) => t.getTime())).size,
    jobs: jobs.rows[0]?.n,
  };
}

describe('schedules: exactly one job per tick, whatever the replicas and interleavings', () => {
  it('fireSchedules: every due tick fired once, by one replica', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const outcome = await run(s, async (r, delay) => {
          await yields(delay);
          const p = (await r.queue.fireSchedules({ declare: delay % 2 === 0 }))._unsafeUnwrap();
          return p.fired.map((f) => f.tick);
        });
        expect(outcome).toEqual({ fired: s.due, distinct: s.due, jobs: s.due });
      }),
      { numRuns: 25 },
    );
  });

  it('naive control: an unlocked read-enqueue-advance fires ticks twice (the property catches it)', async () => {
    const outcome = await fc.check(
      fc.asyncProperty(scenario, async (s) => {
        const result = await run(s, naivePass);
        expect(result).toEqual({ fired: s.due, distinct: s.due, jobs: s.due });
      }),
      { numRuns: 25, seed: 11 },
    );
    expect(outcome.failed).toBe(true);
  });
});
