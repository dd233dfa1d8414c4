import { describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { registerOtel } from '../fixtures/otel-sdk.js';
import { queueInEveryState } from '../fixtures/queue-states.js';
import { useTestDatabase } from '../helpers.js';

const otel = registerOtel();
const { pool } = await useTestDatabase();

describe('queue.metrics()', () => {
  it('counts every state, the oldest ready age and the table statistics', async () => {
    const queue = await queueInEveryState(pool, 'm_q');
    const m = (await queue.metrics())._unsafeUnwrap();
    expect({
      pending: m.pending,
      ready: m.ready,
      running: m.running,
      expired: m.expired,
      dead: m.dead,
    }).toEqual({
      pending: { count: 4, exact: true },
      ready: { count: 3, exact: true },
      running: { count: 2, exact: true },
      expired: { count: 1, exact: true },
      dead: { count: 2, exact: true },
    });
    // Enqueued with run_at a minute ago; the scheduled one does not count.
    expect(m.oldestReadyMs).toBeGreaterThanOrEqual(60_000);
    expect(m.oldestReadyMs).toBeLessThan(3_600_000);
    expect(m.table.totalBytes).toBeGreaterThan(0);
    // The exact stats() agree below the cap.
    const exact = (await queue.stats())._unsafeUnwrap();
    expect([exact.pending, exact.ready, exact.running, exact.expired, exact.dead]).toEqual([4, 3, 2, 1, 2]);
  });

  it('a count at the cap is a lower bound, said so', async () => {
    const queue = await queueInEveryState(pool, 'm_q2');
    const m = (await queue.metrics({ cap: 2 }))._unsafeUnwrap();
    expect(m.pending).toEqual({ count: 2, exact: false });
    expect(m.expired).toEqual({ count: 1, exact: true });
  });

  it('the oldest ready job is found across priorities (not only the first priority)', async () => {
    const queue = await queueInEveryState(pool, 'm_q3');
    // A newer ready job at a lower (earlier) priority must not hide the older one at priority 0.
    (await queue.enqueue(pool, 'a', { n: 9 }, { priority: -5 }))._unsafeUnwrap();
    const m = (await queue.metrics())._unsafeUnwrap();
    expect(m.oldestReadyMs).toBeGreaterThanOrEqual(60_000);
  });

  it('refuses a bad cap before any SQL', async () => {
    const queue = await queueInEveryState(pool, 'm_q4');
    const r = await queue.metrics({ cap: 0 });
    expect(r.isErr() && r.error.kind).toBe('InvalidOptions');
  });
});

describe('queue gauges in OpenTelemetry', () => {
  it('a running worker exports jobs by state and the oldest ready age', async () => {
    const base = await queueInEveryState(pool, 'm_q5');
    const { Queue, TxManager } = await import('../../src/index.js');
    // The same queue with telemetry on (the default: the installed API); a worker of task b only.
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: base.schema,
      tasks: { b: z.object({}) },
    });
    const worker = queue.work({ b: async () => {} }, { listen: false });
    try {
      const jobs = await otel.collect('pg_txkit.queue.jobs');
      const byState = Object.fromEntries(jobs.map((p) => [p.attributes['pg_txkit.job.state'], p.value]));
      expect(byState).toEqual({ pending: 4, ready: 3, running: 2, expired: 1, dead: 2 });
      const age = await otel.collect('pg_txkit.queue.oldest_ready.age');
      expect(age[0]?.value).toBeGreaterThanOrEqual(60);
    } finally {
      await worker.stop();
    }
  });
});
