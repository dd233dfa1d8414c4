import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { Queue, TxManager } from '../../src/index.js';
import { queueAtVersion2 } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();

describe('a queue created by an earlier version (migrations 1 and 2)', () => {
  it('upgrades: the trace context column is added, jobs enqueued before it still run', async () => {
    const schema = 'old_q';
    const s = pg.escapeIdentifier(schema);
    // What migrate() of the earlier version left: its two migrations and its migrations table.
    await queueAtVersion2(pool, schema);
    await pool.query(`INSERT INTO ${s}.jobs (task, payload) VALUES ('email', '{"to":"old@example.com"}')`);
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema,
      tasks: { email: z.object({ to: z.string() }) },
      telemetry: false,
    });
    const migrated = (await queue.migrate())._unsafeUnwrap();
    expect(migrated.applied).toContain(5);
    (await queue.enqueue(pool, 'email', { to: 'new@example.com' }))._unsafeUnwrap();
    const jobs = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(jobs.map((j) => [j.payload, j.traceContext])).toEqual([
      [{ to: 'old@example.com' }, null],
      [{ to: 'new@example.com' }, null],
    ]);
    expect((await queue.completeMany(jobs))._unsafeUnwrap().completed).toHaveLength(2);
  });
});
