import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { Queue, TxManager } from '../../src/index.js';
import { claimFunctionMigration } from '../../src/patterns/queue/migrations/claim-function-migration.js';
import { jobsMigration } from '../../src/patterns/queue/migrations/jobs-migration.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();

describe('a queue created by an earlier version (migrations 1 and 2)', () => {
  it('upgrades: the trace context column is added, jobs enqueued before it still run', async () => {
    const schema = 'old_q';
    const s = pg.escapeIdentifier(schema);
    const channel = pg.escapeLiteral(`${schema}_jobs`);
    // What migrate() of the earlier version left: its two migrations and its migrations table.
    await pool.query(`CREATE SCHEMA ${s}`);
    await pool.query(
      `CREATE TABLE ${s}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const m of [jobsMigration, claimFunctionMigration]) {
      await pool.query(m.sql.replaceAll('{{schema}}', s).replaceAll('{{channel}}', channel));
      await pool.query(`INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`, [m.version, m.name]);
    }
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
