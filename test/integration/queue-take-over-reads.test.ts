// What the completion that takes over a group's next job reads to check the job's priority (a job is
// taken over only when no ready job of the same tasks has a better priority). Every job claimed since
// the table was last vacuumed leaves its entry at the front of jobs_claimable; while a snapshot holds the
// horizon back nothing can remove or even mark them. The property: one take-over (a serial group, its
// running job completed, its next one taken) reads no more with 5,000 such entries in front of the
// group's jobs than with 200 (shared buffers of the whole call, from EXPLAIN (ANALYZE, BUFFERS)). Naive
// control: complete_take_next as migration 0010 left it, whose check read the head of the claim order
// and stepped over every one of them. Counts, not times.
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { migrateQueue } from '../../src/queue/schema/migrate-queue.js';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';
import { useTestDatabase } from '../helpers.js';
import { explainBuffers } from './explain-buffers.js';
import { useHorizonHolder } from './hold-horizon.js';

const { pool } = await useTestDatabase();
const holdHorizon = useHorizonHolder(pool);
const LIMITS = JSON.stringify({ default: { concurrency: 1 } });
let seq = 0;

/** What `text` reads, run on `client` in a transaction rolled back after it. */
const buffers = (client: pg.PoolClient, text: string, values: readonly unknown[]) =>
  explainBuffers(client, text, values, { rolledBack: true });

/**
 * A queue schema migrated up to `version` (autovacuum off on jobs), with the horizon held while `left`
 * jobs of another task are enqueued, claimed and completed, 100 at a time (their entries stay at the
 * front of jobs_claimable); then two jobs of the serial group 'a', the first claimed. Returns what one
 * completion of that job reads, taking the second one over (after two calls: the connection's catalog
 * reads and kept plans are not the call's cost; each call is rolled back).
 */
async function takeOverReads(version: number, left: number) {
  const schema = `q_take_reads_${++seq}`;
  const migrations = QUEUE_MIGRATIONS.filter((m) => m.version <= version);
  (await migrateQueue(pool, schema, {}, migrations))._unsafeUnwrap();
  await pool.query(`ALTER TABLE ${schema}.jobs SET (autovacuum_enabled = off)`);
  await holdHorizon();
  for (let i = 0; i < left; i += 100) {
    await pool.query(`SELECT ${schema}.enqueue('other', '{}'::jsonb) FROM generate_series(1, 100)`);
    const claimed = await pool.query<{ id: string }>(
      `SELECT id::text FROM ${schema}.claim_jobs(100, 60000, ARRAY['other'])`,
    );
    expect(claimed.rows).toHaveLength(100);
    await pool.query(`DELETE FROM ${schema}.jobs WHERE id = ANY($1::bigint[])`, [
      claimed.rows.map((r) => r.id),
    ]);
  }
  await pool.query(
    `SELECT ${schema}.enqueue('work', '{}'::jsonb, group_key => 'a') FROM generate_series(1, 2)`,
  );
  const lease = await pool.query<{ id: string; token: string }>(
    `SELECT (x.job).id::text AS id, (x.job).lease_token::text AS token
       FROM ${schema}.claim_jobs_limited(1, 60000, ARRAY['work'], $1::jsonb) x WHERE (x.job).id IS NOT NULL`,
    [LIMITS],
  );
  expect(lease.rows).toHaveLength(1);
  const { id, token } = lease.rows[0] ?? { id: '', token: '' };
  const text = `SELECT * FROM ${schema}.complete_take_next(ARRAY[$1::bigint], ARRAY[$2::uuid], 60000, ARRAY['work'], $3::jsonb, 10, false)`;
  const client = await pool.connect();
  try {
    // The call takes the group's second job over (checked once, outside EXPLAIN, rolled back).
    await client.query('BEGIN');
    const r = await client.query<{ done: string[]; heads: string | null }>(text, [id, token, LIMITS]);
    await client.query('ROLLBACK');
    expect(r.rows[0]?.done).toEqual([id]);
    expect(r.rows[0]?.heads?.split(';')).toHaveLength(1);
    await buffers(client, text, [id, token, LIMITS]);
    await buffers(client, text, [id, token, LIMITS]);
    return await buffers(client, text, [id, token, LIMITS]);
  } finally {
    client.release(true);
  }
}

const newest = QUEUE_MIGRATIONS.length;

describe('a take-over completion while a snapshot holds the horizon back', () => {
  it('reads no more with 5,000 entries of claimed jobs at the front of the claim order than with 200', async () => {
    const few = await takeOverReads(newest, 200);
    const many = await takeOverReads(newest, 5_000);
    // Measured on PostgreSQL 18 and 14: 17 and 22 (the control below: 22 and 167).
    expect(many).toBeLessThanOrEqual(few + 8);
  });

  it('naive control: the priority check of migration 0010 reads the head of the claim order, and grows', async () => {
    const few = await takeOverReads(12, 200);
    const many = await takeOverReads(12, 5_000);
    expect(many).toBeGreaterThan(few + 50);
  });
});
