// The stored functions' results and the runtime decoder that reads them, held together: each function
// of the frozen schema is called on a freshly migrated queue and its result decoded by the code that
// decodes it in production (the claim statements' aggregates, jobsFromClaim). A decoder change that a
// frozen function does not follow, or a new migration that changes a function's result, fails here.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { type ClaimedRow, jobsFromClaim, RAW_TEXT } from '../../src/queue/job.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { takeNext } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();
const tm = new TxManager(pool);
const tasks = { email: z.object({ to: z.string() }) };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
let seq = 0;

async function migrated(options: Partial<ConstructorParameters<typeof Queue<typeof tasks>>[0]> = {}) {
  const queue = new Queue({ pool, txManager: tm, schema: `q_shapes_${++seq}`, tasks, ...options });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

/** Every field of a job as the claim must decode it, from the row the jobs table holds. */
async function expectDecoded(queue: Queue<typeof tasks>, job: Awaited<ReturnType<typeof claimOne>>) {
  const r = await pool.query(
    `SELECT id::text, task, payload, priority, run_at, attempts, max_attempts, key, last_error, lease_token::text,
            lease_expires_at, created_at, progress, group_key, trace_context FROM ${queue.schema}.jobs WHERE id = $1`,
    [job.id],
  );
  const row = r.rows[0];
  const ms = (d: Date) => Math.floor(d.getTime());
  expect(job).toEqual({
    id: row.id,
    task: row.task,
    payload: row.payload,
    priority: row.priority,
    runAt: new Date(ms(row.run_at)),
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    key: row.key,
    lastError: row.last_error,
    leaseToken: row.lease_token,
    leaseExpiresAt: new Date(ms(row.lease_expires_at)),
    createdAt: new Date(ms(row.created_at)),
    progress: row.progress,
    group: row.group_key,
    traceContext: row.trace_context,
  });
  expect(job.leaseToken).toMatch(UUID);
  expect(job.attempts).toBe(1);
}

async function claimOne(queue: Queue<typeof tasks>) {
  const [job, ...rest] = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
  expect(rest).toEqual([]);
  if (job === undefined) throw new Error('nothing claimed');
  return job;
}

describe('stored functions and their decoder', () => {
  it('claim_jobs: every field of the job decodes as the table holds it', async () => {
    const queue = await migrated();
    (
      await queue.enqueue(pool, 'email', { to: 'a' }, { key: 'k-1', priority: -3, group: 'g' })
    )._unsafeUnwrap();
    await expectDecoded(queue, await claimOne(queue));
  });

  it("claim_jobs_packed: the one row it returns itself decodes as the claim statements' aggregates do", async () => {
    const queue = await migrated();
    (
      await queue.enqueue(pool, 'email', { to: 'p' }, { key: 'k-4', priority: -2, group: 'g' })
    )._unsafeUnwrap();
    (await queue.enqueue(pool, 'email', { to: 'q' }))._unsafeUnwrap();
    const r = await pool.query<ClaimedRow>({
      text: `SELECT * FROM ${queue.schema}.claim_jobs_packed(10, 30000, ARRAY['email'], '-infinity', 0)`,
      rowMode: 'array',
      types: RAW_TEXT,
    });
    expect(r.rows).toHaveLength(1);
    const jobs = jobsFromClaim(r.rows[0]);
    expect(jobs.map((j) => j.payload)).toEqual([{ to: 'p' }, { to: 'q' }]);
    for (const job of jobs) await expectDecoded(queue, job);
    // Nothing to claim: one row of NULLs, no job.
    const none = await pool.query<ClaimedRow>({
      text: `SELECT * FROM ${queue.schema}.claim_jobs_packed(10, 30000, ARRAY['email'], '-infinity', 0)`,
      rowMode: 'array',
      types: RAW_TEXT,
    });
    expect(none.rows).toEqual([[null, null, null, null]]);
    expect(jobsFromClaim(none.rows[0])).toEqual([]);
  });

  it('claim_jobs_limited: the same shape, and its wait row is not a job', async () => {
    const queue = await migrated({ groups: { default: { concurrency: 1 } } });
    (await queue.enqueue(pool, 'email', { to: 'b' }, { group: 'g', key: 'k-2' }))._unsafeUnwrap();
    (await queue.enqueue(pool, 'email', { to: 'c' }, { group: 'g' }))._unsafeUnwrap();
    await expectDecoded(queue, await claimOne(queue));
  });

  it('complete_take_next: the jobs taken over decode as a claim decodes them', async () => {
    const queue = await migrated({ groups: { default: { concurrency: 1 } } });
    (await queue.enqueue(pool, 'email', { to: 'd' }, { group: 'g' }))._unsafeUnwrap();
    (
      await queue.enqueue(pool, 'email', { to: 'e' }, { group: 'g', key: 'k-3', priority: 2 })
    )._unsafeUnwrap();
    const first = await claimOne(queue);
    const r = (await takeNext(queue, [first], { lease: 30_000 }))._unsafeUnwrap();
    expect(r.completed).toEqual([first.id]);
    expect(r.next).toHaveLength(1);
    const next = r.next[0];
    if (next === undefined) throw new Error('nothing taken over');
    expect(next.payload).toEqual({ to: 'e' });
    await expectDecoded(queue, next);
  });
});
