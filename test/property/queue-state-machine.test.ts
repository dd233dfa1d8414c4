import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type Job, Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

// Random enqueue / claim / complete / fail / expire / reap / cancel sequences from several sessions
// (workers that each hold the jobs they claimed, possibly long after their lease was lost). A model
// follows the only token that may settle each job; the property: a settle succeeds IFF it carries the
// job's current lease token, and the table always agrees with the model (state, token, attempts, no
// job lost or completed twice). The naive control settles by id only (no lease fence) and the same
// property must catch it.

const { pool } = await useTestDatabase();
const SCHEMA = 'q_prop';
const queue = new Queue({
  pool,
  txManager: new TxManager(pool),
  schema: SCHEMA,
  tasks: { t: z.object({ n: z.number().int() }) },
  backoff: { baseMs: 0, capMs: 0 },
});
(await queue.migrate())._unsafeUnwrap();

const SESSIONS = 3;
type Op =
  | { op: 'enqueue'; maxAttempts: number }
  | { op: 'claim'; s: number; batch: number }
  | { op: 'complete'; s: number; pick: number }
  | { op: 'fail'; s: number; pick: number; final: boolean }
  | { op: 'expire'; pick: number }
  | { op: 'reap' }
  | { op: 'cancel'; pick: number };

const session = fc.integer({ min: 0, max: SESSIONS - 1 });
const pick = fc.nat({ max: 7 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('enqueue' as const),
      maxAttempts: fc.integer({ min: 1, max: 3 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('claim' as const),
      s: session,
      batch: fc.integer({ min: 1, max: 2 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('complete' as const), s: session, pick }) },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constant('fail' as const), s: session, pick, final: fc.boolean() }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('expire' as const), pick }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('reap' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('cancel' as const), pick }) },
);

/** How settles are written: the real (fenced) queue, or the naive control (by id only). */
interface Settler {
  complete(job: Job): Promise<boolean>;
  fail(job: Job, final: boolean): Promise<boolean>;
}
const fenced: Settler = {
  complete: async (job) => {
    const r = await queue.complete(job);
    if (r.isErr() && r.error.kind !== 'LeaseLost') throw r.error;
    return r.isOk();
  },
  fail: async (job, final) => {
    const r = await queue.fail(job, 'boom', { retryIn: 0, final });
    if (r.isErr() && r.error.kind !== 'LeaseLost') throw r.error;
    return r.isOk();
  },
};
const naive: Settler = {
  complete: async (job) =>
    (await pool.query(`DELETE FROM ${SCHEMA}.jobs WHERE id = $1`, [job.id])).rowCount === 1,
  fail: async (job, final) =>
    (
      await pool.query(
        `UPDATE ${SCHEMA}.jobs SET state = CASE WHEN $2 OR attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
                lease_token = NULL, lease_expires_at = NULL WHERE id = $1`,
        [job.id, final],
      )
    ).rowCount === 1,
};

interface ModelJob {
  state: 'pending' | 'running' | 'dead' | 'gone';
  token: string | null;
  attempts: number;
  maxAttempts: number;
  completions: number;
}

async function runSequence(ops: readonly Op[], settler: Settler): Promise<void> {
  await pool.query(`TRUNCATE ${SCHEMA}.jobs`);
  const model = new Map<string, ModelJob>();
  const held: Job[][] = Array.from({ length: SESSIONS }, () => []);
  const ids = () => [...model.keys()];
  const choose = <T>(items: readonly T[], i: number): T | undefined =>
    items.length ? items[i % items.length] : undefined;

  for (const step of ops) {
    switch (step.op) {
      case 'enqueue': {
        const job = (
          await queue.enqueue(pool, 't', { n: 1 }, { maxAttempts: step.maxAttempts })
        )._unsafeUnwrap();
        model.set(job.id, {
          state: 'pending',
          token: null,
          attempts: 0,
          maxAttempts: step.maxAttempts,
          completions: 0,
        });
        break;
      }
      case 'claim': {
        const jobs = (await queue.claim({ batch: step.batch, lease: '1h' }))._unsafeUnwrap();
        for (const j of jobs) {
          const m = model.get(j.id);
          if (m?.state !== 'pending') throw new Error(`claimed job ${j.id} in model state ${m?.state}`);
          m.state = 'running';
          m.token = j.leaseToken;
          m.attempts++;
          held[step.s]?.push(j);
        }
        break;
      }
      case 'complete':
      case 'fail': {
        const job = choose(held[step.s] ?? [], step.pick);
        if (job === undefined) break;
        const m = model.get(job.id);
        if (m === undefined) throw new Error('unknown job');
        const current = m.state === 'running' && m.token === job.leaseToken;
        const ok = step.op === 'complete' ? await settler.complete(job) : await settler.fail(job, step.final);
        // THE property: a settle succeeds iff it carries the job's current lease.
        if (ok !== current) {
          throw new Error(
            `${step.op} by a ${current ? 'current' : 'stale'} holder ${ok ? 'succeeded' : 'failed'}`,
          );
        }
        if (ok && step.op === 'complete') {
          m.state = 'gone';
          m.completions++;
        } else if (ok) {
          m.state = step.op === 'fail' && (step.final || m.attempts >= m.maxAttempts) ? 'dead' : 'pending';
        }
        if (ok) m.token = null;
        break;
      }
      case 'expire': {
        const id = choose(ids(), step.pick);
        if (id !== undefined) {
          await pool.query(
            `UPDATE ${SCHEMA}.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1 AND state = 'running'`,
            [id],
          );
        }
        break;
      }
      case 'reap': {
        const expired = await pool.query<{ id: string }>(
          `SELECT id FROM ${SCHEMA}.jobs WHERE state = 'running' AND lease_expires_at < now()`,
        );
        const r = (await queue.reap())._unsafeUnwrap();
        if (r.requeued + r.dead !== expired.rowCount) throw new Error('reap missed an expired lease');
        for (const { id } of expired.rows) {
          const m = model.get(String(id));
          if (m === undefined) throw new Error('unknown job');
          m.state = m.attempts >= m.maxAttempts ? 'dead' : 'pending';
          m.token = null;
        }
        break;
      }
      case 'cancel': {
        const id = choose(ids(), step.pick);
        const m = id === undefined ? undefined : model.get(id);
        if (id === undefined || m === undefined) break;
        const r = await queue.cancel(id);
        if (r.isOk() !== (m.state !== 'gone')) throw new Error('cancel disagrees with the model');
        if (r.isOk() && r.value.state !== m.state)
          throw new Error('cancel reported another state than the model');
        m.state = 'gone';
        m.token = null;
        break;
      }
    }
    // The table agrees with the model after every step.
    const rows = await pool.query<{
      id: string;
      state: string;
      lease_token: string | null;
      attempts: number;
      max_attempts: number;
    }>(`SELECT id, state, lease_token, attempts, max_attempts FROM ${SCHEMA}.jobs`);
    const inDb = new Map(rows.rows.map((r) => [String(r.id), r]));
    for (const [id, m] of model) {
      const r = inDb.get(id);
      if (m.completions > 1) throw new Error(`job ${id} completed twice`);
      if (m.state === 'gone') {
        if (r !== undefined) throw new Error(`job ${id} should be gone, is ${r.state}`);
        continue;
      }
      if (r === undefined) throw new Error(`job ${id} lost (model: ${m.state})`);
      if (r.state !== m.state || r.lease_token !== m.token || r.attempts !== m.attempts) {
        throw new Error(
          `job ${id}: table ${r.state}/${r.lease_token}/${r.attempts}, model ${m.state}/${m.token}/${m.attempts}`,
        );
      }
      if (r.attempts > r.max_attempts) throw new Error(`job ${id}: attempts beyond max`);
    }
    if (inDb.size !== [...model.values()].filter((m) => m.state !== 'gone').length)
      throw new Error('unknown rows');
  }
}

const sequences = fc.array(opArb, { minLength: 5, maxLength: 40 });

describe('queue state machine', () => {
  it('a settle succeeds iff it holds the current lease; the table always matches the model', async () => {
    await fc.assert(
      fc.asyncProperty(sequences, (ops) => runSequence(ops, fenced)),
      { numRuns: 120 },
    );
  });

  it('naive control: settling by id without the lease fence is caught by the same property', async () => {
    const result = await fc.check(
      fc.asyncProperty(sequences, (ops) => runSequence(ops, naive)),
      { numRuns: 400 },
    );
    expect(result.failed).toBe(true);
    expect(String(result.errorInstance)).toMatch(/stale holder succeeded/);
  });
});
