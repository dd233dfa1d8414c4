// The plain claim as the schema's claim_jobs_packed function (migration 0008): a claim of ungrouped jobs
// does not touch job_groups; a claim of grouped jobs counts them in their groups, locking the groups in
// key order before it writes their counters; claim_jobs (the measured claim and the sweep) locks them in
// key order too.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { type ClaimedRow, jobsFromClaim, RAW_TEXT } from '../../src/queue/job.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually, whileGroupsShared } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();
const tm = new TxManager(pool);
const tasks = { email: z.object({ to: z.string() }) };
let seq = 0;

async function freshQueue() {
  const queue = new Queue({ pool, txManager: tm, schema: `q_claimpk_${++seq}`, tasks });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

/** The plain claim the worker sends, from the front, on `db`, decoded by the worker's decoder. */
async function packedClaim(db: pg.Pool | pg.PoolClient, queue: Queue<typeof tasks>, n: number) {
  const r = await db.query<ClaimedRow>({
    text: `SELECT * FROM ${pg.escapeIdentifier(queue.schema)}.claim_jobs_packed($1, 30000, ARRAY['email'], '-infinity', 0)`,
    values: [n],
    rowMode: 'array',
    types: RAW_TEXT,
  });
  return jobsFromClaim(r.rows[0]);
}

/** claim_jobs from the front (the worker's sweep), its rows' payloads and groups. */
async function sweepClaim(db: pg.Pool | pg.PoolClient, queue: Queue<typeof tasks>, n: number) {
  const r = await db.query<{ payload: unknown; group_key: string | null }>(
    `SELECT payload, group_key FROM ${pg.escapeIdentifier(queue.schema)}.claim_jobs($1, 30000, ARRAY['email'], '-infinity', 0)`,
    [n],
  );
  return r.rows.map((row) => ({ payload: row.payload, group: row.group_key }));
}

async function running(queue: Queue<typeof tasks>) {
  const r = await pool.query<{ key: string; running: number }>(
    `SELECT key, running FROM ${pg.escapeIdentifier(queue.schema)}.job_groups ORDER BY key`,
  );
  return r.rows;
}

describe('claim_jobs_packed', () => {
  it('a claim of ungrouped jobs does not lock job_groups: it claims while another transaction holds the table in SHARE mode', async () => {
    const queue = await freshQueue();
    (await queue.enqueueMany(pool, 'email', [{ to: 'a' }, { to: 'b' }]))._unsafeUnwrap();
    const claimed = await whileGroupsShared(pool, queue.schema, (c) =>
      packedClaim(c, queue, 5).catch((e: { code?: string }) => e.code ?? 'no SQLSTATE'),
    );
    expect(typeof claimed === 'string' ? claimed : claimed.map((j) => j.payload)).toEqual([
      { to: 'a' },
      { to: 'b' },
    ]);
  });

  it('naive control: a claim of a grouped job counts it in its group, so it does ask for that lock (here: the lock timeout)', async () => {
    const queue = await freshQueue();
    (await queue.enqueue(pool, 'email', { to: 'c' }, { group: 'g' }))._unsafeUnwrap();
    expect(
      await whileGroupsShared(pool, queue.schema, (c) =>
        packedClaim(c, queue, 5).catch((e: { code?: string }) => e.code ?? 'no SQLSTATE'),
      ),
    ).toBe('55P03');
    // The failed claim left nothing behind: the job is still pending and its group at 0.
    expect(await running(queue)).toEqual([{ key: 'g', running: 0 }]);
    const [job] = await packedClaim(pool, queue, 5);
    expect(job).toMatchObject({ payload: { to: 'c' }, group: 'g', attempts: 1 });
    expect(await running(queue)).toEqual([{ key: 'g', running: 1 }]);
  });

  it('a batch of grouped and ungrouped jobs: each group counts its claimed jobs; the jobs come in claim order', async () => {
    const queue = await freshQueue();
    (
      await queue.enqueueMany(
        pool,
        'email',
        [{ to: '1' }, { to: '2' }, { to: '3' }, { to: '4' }, { to: '5' }],
        {
          groups: ['b', null, 'a', 'b', 'c'],
        },
      )
    )._unsafeUnwrap();
    const claimed = await packedClaim(pool, queue, 4);
    expect(claimed.map((j) => [j.payload, j.group])).toEqual([
      [{ to: '1' }, 'b'],
      [{ to: '2' }, null],
      [{ to: '3' }, 'a'],
      [{ to: '4' }, 'b'],
    ]);
    expect(await running(queue)).toEqual([
      { key: 'a', running: 1 },
      { key: 'b', running: 2 },
      { key: 'c', running: 0 },
    ]);
    expect((await packedClaim(pool, queue, 4)).map((j) => j.group)).toEqual(['c']);
    expect(await packedClaim(pool, queue, 4)).toEqual([]);
  });
});

describe('group locks in key order', () => {
  for (const [name, claim] of [
    ['claim_jobs_packed', packedClaim],
    ['claim_jobs', sweepClaim],
  ] as const) {
    it(`${name}: a claim waiting for group b (its first job's) already holds group a`, async () => {
      const queue = await freshQueue();
      const s = pg.escapeIdentifier(queue.schema);
      // Group b's row is created before a's: a scan of job_groups meets b first.
      (await queue.enqueue(pool, 'email', { to: '1' }, { group: 'b' }))._unsafeUnwrap();
      (await queue.enqueue(pool, 'email', { to: '2' }, { group: 'a' }))._unsafeUnwrap();
      const holder = await pool.connect();
      const probe = await pool.connect();
      const claimer = await pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM ${s}.job_groups WHERE key = 'b' FOR UPDATE`);
        const claiming = claim(claimer, queue, 2);
        // The claim is waiting for a lock (group b's row, held above); found by its text, as behind a
        // transaction-mode PgBouncer its server session is not known in advance.
        await eventually(async () => {
          const r = await probe.query(
            `SELECT 1 FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND query LIKE $1 AND pid <> pg_backend_pid()`,
            [`%${name}(%`],
          );
          return r.rowCount === 1;
        });
        // ... and holds group a's row already: a NOWAIT lock of it fails.
        const a = await probe.query(`SELECT 1 FROM ${s}.job_groups WHERE key = 'a' FOR UPDATE NOWAIT`).then(
          () => 'not locked by the claim',
          (e: { code?: string }) => e.code,
        );
        await holder.query('COMMIT');
        expect((await claiming).map((j) => j.group)).toEqual(['b', 'a']);
        expect(a).toBe('55P03');
        expect(await running(queue)).toEqual([
          { key: 'a', running: 1 },
          { key: 'b', running: 1 },
        ]);
      } finally {
        await holder.query('ROLLBACK').catch(() => {});
        holder.release();
        probe.release();
        claimer.release();
      }
    });
  }
});
