// The one insert into jobs as the schema's insert_jobs function (migration 0008): a job without a group
// does not write job_groups, a job without a key is inserted without ON CONFLICT and a keyed one with it,
// in every mix of one call; a schema of 0007 migrates, and a producer of the previous version (its insert
// statement) still enqueues on the new schema.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { migrateQueue } from '../../src/queue/schema/migrate-queue.js';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { whileGroupsShared } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();
const tm = new TxManager(pool);
const tasks = { email: z.object({ to: z.string() }) };
let seq = 0;

async function freshQueue() {
  const queue = new Queue({ pool, txManager: tm, schema: `q_insfn_${++seq}`, tasks });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

describe('insert_jobs', () => {
  it('a job without a group does not lock job_groups: it enqueues while another transaction holds the table in SHARE mode', async () => {
    const queue = await freshQueue();
    const job = await whileGroupsShared(pool, queue.schema, async (c) =>
      queue.enqueue(c, 'email', { to: 'a' }),
    );
    expect(job._unsafeUnwrap()).toMatchObject({ created: true, group: null, key: null, state: 'pending' });
    const many = await whileGroupsShared(pool, queue.schema, async (c) =>
      queue.enqueueMany(c, 'email', [{ to: 'b' }, { to: 'c' }], { keys: ['k1', null] }),
    );
    expect(many._unsafeUnwrap()).toMatchObject({ skipped: 0 });
    expect(many._unsafeUnwrap().ids).toHaveLength(2);
  });

  it('naive control: a job with a group creates its row, so it does wait for that lock (here: the lock timeout)', async () => {
    const queue = await freshQueue();
    const job = await whileGroupsShared(pool, queue.schema, async (c) =>
      queue.enqueue(c, 'email', { to: 'a' }, { group: 'g1' }),
    );
    expect(job._unsafeUnwrapErr()).toMatchObject({ kind: 'LockNotAvailable' });
    const ok = (await queue.enqueue(pool, 'email', { to: 'a' }, { group: 'g1' }))._unsafeUnwrap();
    expect(ok).toMatchObject({ created: true, group: 'g1' });
    const groups = await pool.query(`SELECT key FROM ${pg.escapeIdentifier(queue.schema)}.job_groups`);
    expect(groups.rows).toEqual([{ key: 'g1' }]);
  });

  it('keys in a mix: keyed duplicates are skipped (live jobs and earlier elements), jobs without a key never are', async () => {
    const queue = await freshQueue();
    const first = (await queue.enqueue(pool, 'email', { to: 'x' }, { key: 'k' }))._unsafeUnwrap();
    const many = (
      await queue.enqueueMany(
        pool,
        'email',
        [{ to: 'a' }, { to: 'b' }, { to: 'c' }, { to: 'd' }, { to: 'e' }],
        {
          keys: [null, 'k', 'm', null, 'm'],
          groups: ['g2', null, 'g1', null, 'g1'],
        },
      )
    )._unsafeUnwrap();
    expect(many.skipped).toBe(2);
    const rows = await pool.query<{ payload: { to: string }; key: string | null; group_key: string | null }>(
      `SELECT payload, key, group_key FROM ${pg.escapeIdentifier(queue.schema)}.jobs ORDER BY id`,
    );
    expect(rows.rows).toEqual([
      { payload: { to: 'x' }, key: 'k', group_key: null },
      { payload: { to: 'a' }, key: null, group_key: 'g2' },
      { payload: { to: 'c' }, key: 'm', group_key: 'g1' },
      { payload: { to: 'd' }, key: null, group_key: null },
    ]);
    // Without keys, the same payload twice is two jobs; one enqueue without a key is always created.
    const plain = (await queue.enqueueMany(pool, 'email', [{ to: 'a' }, { to: 'a' }]))._unsafeUnwrap();
    expect(plain).toMatchObject({ skipped: 0 });
    expect((await queue.enqueue(pool, 'email', { to: 'a' }))._unsafeUnwrap().created).toBe(true);
    // The keyed enqueue finds the live job with its key.
    const again = (await queue.enqueue(pool, 'email', { to: 'y' }, { key: 'k' }))._unsafeUnwrap();
    expect(again).toMatchObject({ id: first.id, created: false });
    const groups = await pool.query(
      `SELECT key FROM ${pg.escapeIdentifier(queue.schema)}.job_groups ORDER BY key`,
    );
    expect(groups.rows).toEqual([{ key: 'g1' }, { key: 'g2' }]);
  });

  it('a schema of 0007 migrates; its keyed job is found by the new enqueue, and the previous insert statement still runs', async () => {
    const schema = `q_insfn_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    (
      await migrateQueue(
        pool,
        schema,
        {},
        QUEUE_MIGRATIONS.filter((m) => m.version <= 7),
      )
    )._unsafeUnwrap();
    await pool.query(`SELECT ${s}.enqueue('email', '{"to":"a"}'::jsonb, key => 'k')`);
    const queue = new Queue({ pool, txManager: tm, schema, tasks });
    expect((await queue.migrate())._unsafeUnwrap()).toEqual({
      applied: QUEUE_MIGRATIONS.filter((m) => m.version >= 8).map((m) => m.version),
      version: QUEUE_MIGRATIONS.length,
    });
    expect((await queue.enqueue(pool, 'email', { to: 'b' }, { key: 'k' }))._unsafeUnwrap()).toMatchObject({
      created: false,
    });
    // A producer of the previous version during a rolling deploy: its statement, as it sent it.
    const previous = `
      WITH grp AS (
        INSERT INTO ${s}.job_groups (key)
        SELECT DISTINCT g FROM unnest($9::text[]) AS g WHERE g IS NOT NULL ORDER BY g
        ON CONFLICT (key) DO NOTHING
      ),
      ins AS (
        INSERT INTO ${s}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                    backoff_cap_ms, key, group_key, trace_context)
        SELECT $1, t.payload, $3, coalesce(t.run_at, $4::timestamptz, now()), $5, $6, $7, t.key, t.group_key,
               $10::jsonb
          FROM unnest($2::jsonb[], $8::text[], $9::text[], $11::timestamptz[])
               WITH ORDINALITY AS t(payload, key, group_key, run_at, n)
         ORDER BY t.n
        ON CONFLICT (task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
        RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key
      )
      SELECT id FROM ins`;
    const old = await pool.query(previous, [
      'email',
      ['{"to":"c"}', '{"to":"d"}'],
      0,
      null,
      5,
      1000,
      3_600_000,
      ['k', null],
      [null, 'g'],
      null,
      [null, null],
    ]);
    expect(old.rowCount).toBe(1);
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.payload)).toEqual([{ to: 'a' }, { to: 'd' }]);
  });
});
