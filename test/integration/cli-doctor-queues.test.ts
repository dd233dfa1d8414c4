import { describe, expect, it } from 'vitest';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';
import { queueInEveryState } from '../fixtures/queue-states.js';
import { useTestDatabase } from '../helpers.js';
import { runMain } from './cli-support.js';

const { pool, url } = await useTestDatabase();

describe('pg-txkit doctor: queue health', () => {
  it('reports no queue in a database without one, and stays healthy', async () => {
    const r = await runMain(['doctor', '--json', '--url', url]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).queues).toEqual([]);
  });

  it('--json: finds the queue schemas itself, with depth by state, dead jobs, expired leases', async () => {
    await queueInEveryState(pool, 'doc_q');
    await queueInEveryState(pool, 'doc_q2');
    const r = await runMain(['doctor', '--json', '--url', url]);
    expect(r.code).toBe(1); // findings: an expired lease, dead jobs
    const { queues, forest } = JSON.parse(r.stdout);
    expect(forest).toEqual([]); // the lock report is still there
    expect(queues.map((q: { schema: string }) => q.schema)).toEqual(['doc_q', 'doc_q2']);
    const q = queues[0];
    expect(q).toMatchObject({
      schema: 'doc_q',
      version: QUEUE_MIGRATIONS.length,
      pending: { count: 4, exact: true },
      ready: { count: 3, exact: true },
      running: { count: 2, exact: true },
      expired: { count: 1, exact: true },
      dead: { count: 2, exact: true },
    });
    expect(q.oldestReadyMs).toBeGreaterThanOrEqual(60_000);
    expect(q.findings.map((f: { message: string }) => f.message)).toEqual([
      expect.stringMatching(/^1 running job\(s\) with an expired lease/),
      expect.stringMatching(/^2 dead job\(s\)/),
    ]);
  });

  it('--queue-schema picks one; --queue-lag makes a waiting job a finding; the table beside the lock report', async () => {
    const r = await runMain(['doctor', '--url', url, '--queue-schema', 'doc_q2', '--queue-lag', '30s']);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('Blocking tree (root blockers first)');
    expect(r.stdout).toContain('Queues');
    expect(r.stdout).toMatch(/schema\s+version\s+pending\s+ready\s+running\s+expired\s+dead\s+oldest ready/);
    const latest = QUEUE_MIGRATIONS.length;
    expect(r.stdout).toMatch(new RegExp(`doc_q2\\s+${latest}\\s+4\\s+3\\s+2\\s+1\\s+2\\s+6\\d s`));
    expect(r.stdout).not.toMatch(/doc_q\s/);
    expect(r.stdout).toMatch(/✖ doc_q2: the oldest ready job waits for \d+ s/);
    expect(r.stdout).toMatch(/! doc_q2: 2 dead job\(s\)/);
  });

  it('--no-queues: the lock report alone (no queue table, no queues key, queue findings do not count)', async () => {
    const text = await runMain(['doctor', '--url', url, '--no-queues']);
    expect(text.code).toBe(0); // the queues' findings (dead jobs, an expired lease) are not asked for
    expect(text.stdout).toContain('Blocking tree (root blockers first)');
    expect(text.stdout).not.toContain('Queues');
    const json = await runMain(['doctor', '--url', url, '--no-queues', '--json']);
    expect(json.code).toBe(0);
    const report = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(report).not.toHaveProperty('queues');
    expect(report).toHaveProperty('forest', []);
  });

  it('--queue-schema naming a schema without a queue says so', async () => {
    const r = await runMain(['doctor', '--url', url, '--queue-schema', 'nope']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/no pg-txkit queue in schema nope \(queues found: doc_q, doc_q2\)/);
  });
});

describe('pg-txkit doctor as a pg_monitor role', () => {
  it('reports a queue it may not read as a finding, and still prints the rest', async () => {
    await pool.query(`DO $$ BEGIN
      IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'doctor_q') THEN
        CREATE ROLE doctor_q LOGIN PASSWORD 'doctor' IN ROLE pg_monitor;
      END IF; END $$`);
    const monitorUrl = new URL(url);
    monitorUrl.username = 'doctor_q';
    monitorUrl.password = 'doctor';
    const r = await runMain(['doctor', '--json', '--url', monitorUrl.toString(), '--queue-schema', 'doc_q']);
    expect(r.code).toBe(1);
    const { queues } = JSON.parse(r.stdout);
    expect(queues[0].schema).toBe('doc_q');
    expect(queues[0].error).toMatch(/permission denied/);
    expect(queues[0].findings[0].message).toMatch(/grant SELECT on doc_q.jobs/);
  });
});
