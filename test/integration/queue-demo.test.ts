import { expect, it } from 'vitest';
import { scenarios } from '../../src/cli/scenarios/queue.js';
import { eventually } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();

it.each(scenarios.map((s) => [s.id, s] as const))(
  'demo scenario %s: naive finds anomalies, the pattern none',
  async (_id, scenario) => {
    await pool.query(
      'DROP SCHEMA public CASCADE; CREATE SCHEMA public; DROP SCHEMA IF EXISTS demo_queue CASCADE',
    );
    const result = await scenario.run({
      url,
      clients: 8,
      scale: 0.05,
      onProgress: () => {},
      signal: new AbortController().signal,
    });
    expect(result.naive.anomalies).toBeGreaterThan(0);
    expect(result.pattern.anomalies).toBe(0);
    expect(result.pattern.operations).toBeGreaterThan(0);
    // The scenario closed its connections (a closed backend leaves pg_stat_activity a moment later).
    await eventually(async () => {
      const open = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND backend_type = 'client backend'`,
      );
      return (open.rows[0]?.n ?? 0) <= pool.totalCount;
    }, 5000);
  },
);
