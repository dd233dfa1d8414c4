// redrive() when several dead jobs of a task share a key: only one of them may be live at a time
// (the partial unique index jobs_key), so the newest dead job per key is redriven and the others stay
// dead with a reason — never a UniqueViolation that fails the whole batch.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { url } = await useTestDatabase({ max: 2 });
// The README's setup: a plain pool.
const pool = new pg.Pool({ connectionString: url });
afterAll(() => pool.end());
const tm = new TxManager(pool);
const tasks = { email: z.object({ to: z.string() }), sms: z.object({ to: z.string() }) };
let seq = 0;

async function freshQueue() {
  const queue = new Queue({ pool, txManager: tm, schema: `q_redrive_${++seq}`, tasks });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

/** Enqueues a job of `task` with `key` and fails it for good: a dead job. */
async function deadJob(queue: Queue<typeof tasks>, task: 'email' | 'sms', key: string | undefined) {
  const job = (
    await queue.enqueue(pool, task, { to: 'x' }, key === undefined ? {} : { key })
  )._unsafeUnwrap();
  const [claimed] = (await queue.claim({ tasks: [task] }))._unsafeUnwrap();
  expect(claimed?.id).toBe(job.id);
  expect((await queue.fail(claimed!, `failed ${job.id}`, { final: true }))._unsafeUnwrap().state).toBe(
    'dead',
  );
  return job.id;
}

async function states(queue: Queue<typeof tasks>) {
  const r = await pool.query<{ id: string; state: string; last_error: string }>(
    `SELECT id, state, last_error FROM ${queue.schema}.jobs ORDER BY id`,
  );
  return r.rows;
}

describe('redrive with duplicate keys', () => {
  it('redrives the newest dead job per key, leaves the older ones dead with a reason', async () => {
    const queue = await freshQueue();
    const older = await deadJob(queue, 'email', 'welcome:1');
    const newer = await deadJob(queue, 'email', 'welcome:1');
    const keyless = await deadJob(queue, 'email', undefined);
    const otherTask = await deadJob(queue, 'sms', 'welcome:1');
    const redriven = (await queue.redrive())._unsafeUnwrap();
    expect([...redriven].sort()).toEqual([newer, keyless, otherTask].sort());
    const rows = await states(queue);
    expect(rows.find((r) => r.id === older)).toMatchObject({ state: 'dead' });
    expect(rows.find((r) => r.id === older)?.last_error).toContain(
      `job ${newer} with the same key was redriven`,
    );
    expect(
      rows
        .filter((r) => r.state === 'pending')
        .map((r) => r.id)
        .sort(),
    ).toEqual(redriven.slice().sort());
  });

  it('a task filter and an id list that both name duplicate keys never fail the batch', async () => {
    const queue = await freshQueue();
    const ids = [
      await deadJob(queue, 'email', 'k'),
      await deadJob(queue, 'email', 'k'),
      await deadJob(queue, 'email', 'k'),
    ];
    expect((await queue.redrive({ ids }))._unsafeUnwrap()).toEqual([ids[2]]);
    // The key is live again: the remaining dead ones stay dead.
    expect((await queue.redrive({ task: 'email' }))._unsafeUnwrap()).toEqual([]);
    expect((await states(queue)).map((r) => r.state)).toEqual(['dead', 'dead', 'pending']);
  });

  it('concurrent redrives of the same keys redrive each key once', async () => {
    const queue = await freshQueue();
    for (let k = 0; k < 5; k++) for (let i = 0; i < 3; i++) await deadJob(queue, 'email', `k${k}`);
    const results = await Promise.all([queue.redrive(), queue.redrive(), queue.redrive()]);
    const all = results.flatMap((r) => r._unsafeUnwrap());
    expect(all).toHaveLength(5);
    expect((await queue.stats())._unsafeUnwrap()).toMatchObject({ pending: 5, dead: 10 });
  });
});
