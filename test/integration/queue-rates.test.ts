// Rate limits per task and per group, enforced in the database across worker processes (Queue
// instances with pools of their own): at most `limit` claims in any interval of `per`, measured on the
// server's own claim times; jobs over the rate wait (pending), and workers sleep until a window frees a
// place instead of polling.
import pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { type Job, Queue, type QueueOptions } from '../../src/patterns/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually } from '../fixtures/queue-helpers.js';
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

/**
 * The largest number of claims within any interval shorter than `perMs`, from the server's claim
 * times (a lease expires LEASE_MS after its claim's now()).
 */
function mostWithin(times: readonly number[], perMs: number): number {
  const t = [...times].sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; j < t.length; j++) {
    while ((t[j] ?? 0) - (t[i] ?? 0) >= perMs) i++;
    most = Math.max(most, j - i + 1);
  }
  return most;
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
  const claims = replicas.map((q) => vi.spyOn(q, 'claimBatch'));
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
