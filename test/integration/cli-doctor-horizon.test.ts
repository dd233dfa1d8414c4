import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { runMain } from './cli-support.js';

const { pool, url } = await useTestDatabase();

/** Runs `n` no-op jobs of a queue in `schema` through a worker, and waits until each one was settled. */
async function churn(schema: string, n: number): Promise<void> {
  const queue = new Queue({ pool, txManager: new TxManager(pool), schema, tasks: { noop: z.object({}) } });
  (await queue.migrate())._unsafeUnwrap();
  (
    await queue.enqueueMany(
      pool,
      'noop',
      Array.from({ length: n }, () => ({})),
    )
  )._unsafeUnwrap();
  let ran = 0;
  let allRan = () => {};
  const done = new Promise<void>((resolve) => {
    allRan = resolve;
  });
  const worker = queue.work({
    noop: () => {
      ran++;
      if (ran === n) allRan();
    },
  });
  await done;
  await worker.stop(); // settles what ran: every job is deleted
  const left = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.jobs`);
  expect(left.rows[0]?.n).toBe(0);
}

/** VACUUMs the queue's table: what it could not remove is its dead tuple count (n_dead_tup). */
/** The server's major version. */
const major = Math.floor(
  Number((await pool.query<{ n: string }>("SELECT current_setting('server_version_num') AS n")).rows[0]?.n) /
    10_000,
);

/**
 * The jobs table's dead tuples after a VACUUM, once `ok` holds and two readings agree. Until PostgreSQL 15
 * a statistics collector process applies each backend's counts up to half a second later, so a reading
 * right after the VACUUM may not include it or the churn before it. Bounded: 10 s.
 */
async function deadTuplesAfterVacuum(schema: string, ok: (n: number) => boolean): Promise<number> {
  let last = -1;
  for (const until = Date.now() + 10_000; ; ) {
    await pool.query(`VACUUM ${schema}.jobs`);
    if (major < 15) await new Promise((resolve) => setTimeout(resolve, 600));
    await pool.query('SELECT pg_stat_clear_snapshot()');
    const r = await pool.query<{ n: number }>(
      `SELECT n_dead_tup::int AS n FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
      [schema],
    );
    const n = r.rows[0]?.n ?? -1;
    if ((ok(n) && n === last) || Date.now() > until) return n;
    last = n;
  }
}

interface Holder {
  kind: string;
  query: string | null;
  id: string;
  detail: string;
  ageMs: number | null;
  xidAge: number;
}

describe('pg-txkit doctor: what holds the MVCC horizon back', () => {
  it('reports a session holding a REPEATABLE READ snapshot, with the dead tuples the queue holds meanwhile; nothing once it ends', async () => {
    await churn('hz_q', 10);
    expect(await deadTuplesAfterVacuum('hz_q', (n) => n === 0)).toBe(0);
    const before = await runMain(['doctor', '--json', '--url', url, '--horizon-age', '0s']);
    expect(JSON.parse(before.stdout).horizon).toEqual([]);
    expect(before.code).toBe(0);

    // A session of another application holds a snapshot, idle in transaction.
    const holder = new pg.Client({ connectionString: url, application_name: 'nightly report' });
    await holder.connect();
    try {
      const pid = String(
        (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid,
      );
      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      // Its snapshot is taken by this statement, the last it sent.
      await holder.query("SELECT 'card 4242' AS secret");
      await churn('hz_q', 300);
      // Vacuum cannot remove what the snapshot may still see: every claimed (updated) and settled
      // (deleted) row version of the 300 jobs stays.
      const dead = await deadTuplesAfterVacuum('hz_q', (n) => n >= 300);
      expect(dead).toBeGreaterThanOrEqual(300);

      const json = await runMain(['doctor', '--json', '--url', url, '--horizon-age', '0s']);
      expect(json.code).toBe(1);
      const report = JSON.parse(json.stdout) as {
        horizon: Holder[];
        queues: { schema: string; findings: { severity: string; message: string }[] }[];
      };
      const held = report.horizon.find((h) => h.id === pid);
      expect(held).toMatchObject({ kind: 'session', detail: 'nightly report, idle in transaction' });
      expect(held?.xidAge).toBeGreaterThan(0);
      expect(held?.ageMs).toBeGreaterThanOrEqual(0);
      const q = report.queues.find((x) => x.schema === 'hz_q');
      expect(q?.findings).toContainEqual({
        severity: 'warning',
        message: expect.stringMatching(
          new RegExp(
            `^session ${pid} \\(postgres, nightly report, idle in transaction\\) has held the MVCC horizon back for \\d+ s \\([\\d,]+ transactions\\): ` +
              `meanwhile the jobs table holds ${dead.toLocaleString('en-US')} dead tuples vacuum cannot remove, .*` +
              `end it \\(SELECT pg_terminate_backend\\(${pid}\\)\\) and set idle_in_transaction_session_timeout$`,
          ),
        ),
      });

      const text = await runMain(['doctor', '--url', url, '--horizon-age', '0s']);
      expect(text.code).toBe(1);
      expect(text.stdout).toMatch(
        new RegExp(
          `MVCC horizon held for \\S+( \\S+)? by session ${pid} \\(nightly report, idle in transaction; xmin \\d+`,
        ),
      );

      expect(held?.query).toBe("SELECT 'card 4242' AS secret");
      const redacted = await runMain(['doctor', '--json', '--url', url, '--horizon-age', '0s', '--redact']);
      const hidden = (JSON.parse(redacted.stdout) as { horizon: { id: string; query: string }[] }).horizon;
      expect(hidden.find((h) => h.id === pid)?.query).toBe('SELECT $? AS secret');

      // The default threshold (1 min) is not reached by a snapshot this young.
      const young = await runMain(['doctor', '--json', '--url', url]);
      expect(JSON.parse(young.stdout).horizon).toEqual([]);
    } finally {
      await holder.query('COMMIT').catch(() => {});
      await holder.end();
    }
    // Once the snapshot is gone, vacuum removes them all, and the doctor has nothing to say.
    expect(await deadTuplesAfterVacuum('hz_q', (n) => n === 0)).toBe(0);
    const after = await runMain(['doctor', '--json', '--url', url, '--horizon-age', '0s']);
    expect(after.code).toBe(0);
    expect(JSON.parse(after.stdout).horizon).toEqual([]);
  });

  it('--no-queues leaves the horizon out, as the queues', async () => {
    const r = await runMain(['doctor', '--json', '--url', url, '--no-queues']);
    expect(JSON.parse(r.stdout)).not.toHaveProperty('horizon');
  });
});
