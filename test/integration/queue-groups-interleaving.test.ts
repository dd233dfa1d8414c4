// The claim's locking, interleaved step by step (Schedule: two sessions, blocking seen from a monitor
// connection): two claims of the same serial group at once. The naive design — lock the group row,
// then count its running jobs, in ONE statement under READ COMMITTED — runs two jobs of the group at
// once: the count uses the statement's snapshot, taken before the lock was granted, and misses the
// claim committed meanwhile. claim_jobs_limited reads a counter kept on the locked row (its newest
// version) and skips a group another claim holds: one job.
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { Schedule } from '../../src/testing/schedule.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase({ max: 4 });
const schedules: Schedule[] = [];
afterAll(() => Promise.all(schedules.map((s) => s.close())));
let seq = 0;

/** A migrated queue of serial groups holding one job per entry of `groups`, and two sessions. */
async function serialGroups(groups: string[]) {
  const schema = `q_ginter_${++seq}`;
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema,
    tasks: { work: z.object({}) },
    groups: { default: { concurrency: 1 } },
  });
  (await queue.migrate())._unsafeUnwrap();
  (
    await queue.enqueueMany(
      pool,
      'work',
      groups.map(() => ({})),
      { groups },
    )
  )._unsafeUnwrap();
  const s = await Schedule.open(url, { sessions: ['t1', 't2'] });
  schedules.push(s);
  return { schema, s };
}

async function serialGroup() {
  const { schema, s } = await serialGroups(['g', 'g', 'g']);
  const running = async () =>
    (
      await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${schema}.jobs WHERE group_key = 'g' AND state = 'running'`,
      )
    ).rows[0]?.n;
  return { schema, s, running };
}

describe('two claims of one serial group, interleaved', () => {
  it('naive control: lock the group, then count running jobs, in one statement: two run at once', async () => {
    const { schema, s, running } = await serialGroup();
    const naive = `
      WITH g AS MATERIALIZED (SELECT key FROM ${schema}.job_groups WHERE key = 'g' FOR UPDATE),
      n AS MATERIALIZED (
        SELECT (SELECT count(*) FROM ${schema}.jobs j WHERE j.group_key = g.key AND j.state = 'running') AS running FROM g),
      c AS MATERIALIZED (
        SELECT j.id FROM ${schema}.jobs j WHERE j.group_key = 'g' AND j.state = 'pending' AND (SELECT running FROM n) < 1
         ORDER BY j.id LIMIT 1 FOR UPDATE SKIP LOCKED)
      UPDATE ${schema}.jobs j SET state = 'running', lease_token = gen_random_uuid(),
             lease_expires_at = now() + interval '1 minute'
        FROM c WHERE j.id = c.id RETURNING j.id`;
    const out = await s.run([
      ['t1', 'BEGIN'],
      ['t1', naive],
      ['t2', naive], // waits for t1's lock on the group row
      ['t1', 'COMMIT'],
    ]);
    expect(out[2]?.blocked).toBe(true);
    expect(out[1]?.rowCount).toBe(1);
    expect(out[2]?.rowCount).toBe(1);
    expect(await running()).toBe(2);
  });

  it('claim_jobs_limited: the second claim skips the group held by the first; one job runs', async () => {
    const { schema, s, running } = await serialGroup();
    const claim = `SELECT (r.job).id FROM ${schema}.claim_jobs_limited(1, 60000, ARRAY['work'],
      '{"default": {"concurrency": 1}, "groups": {}, "tasks": {}}') r WHERE (r.job).id IS NOT NULL`;
    const out = await s.run([
      ['t1', 'BEGIN'],
      ['t1', claim],
      ['t2', claim], // does not wait: the group is locked, so it is skipped
      ['t1', 'COMMIT'],
      ['t2', claim], // after the commit: the counter says the group is full
    ]);
    expect(out[1]?.rowCount).toBe(1);
    expect(out[2]?.blocked).toBe(false);
    expect(out[2]?.rowCount).toBe(0);
    expect(out[4]?.rowCount).toBe(0);
    expect(await running()).toBe(1);
  });
});

describe('two claims sharing a head window, interleaved', () => {
  it('the second claim takes the next groups with room instead of coming back empty', async () => {
    const { schema, s } = await serialGroups(Array.from({ length: 10 }, (_, i) => `g${i}`));
    const claim = `SELECT (r.job).id FROM ${schema}.claim_jobs_limited(3, 60000, ARRAY['work'],
      '{"default": {"concurrency": 1}, "groups": {}, "tasks": {}}') r WHERE (r.job).id IS NOT NULL`;
    const out = await s.run([
      ['t1', 'BEGIN'],
      ['t1', claim],
      ['t2', claim], // the same ten ready jobs in its window; t1 holds the first three groups
      ['t1', 'COMMIT'],
    ]);
    expect(out[1]?.rowCount).toBe(3);
    expect(out[2]?.blocked).toBe(false);
    expect(out[2]?.rowCount).toBe(3);
    const over = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT group_key FROM ${schema}.jobs WHERE state = 'running'
        GROUP BY group_key HAVING count(*) > 1) x`,
    );
    expect(over.rows[0]?.n).toBe(0);
  });
});
