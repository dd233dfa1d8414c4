// What the queue's health queries cost on a big table: 1 000 000 jobs (600k ready over 3 priorities,
// 100k scheduled, 200k running, 50k with an expired lease, 50k dead), vacuumed and analyzed. For
// queue.metrics() (bounded scans of the partial indexes, loose index scan for the oldest ready job)
// and queue.stats() (exact count(*) FILTER over every row), EXPLAIN (ANALYZE, BUFFERS): the median
// execution time of 7 runs (min–max) and the shared buffers touched.
//
// Run: npx esbuild bench/standalone/queue-metrics-cost.ts --bundle --platform=node --format=esm --packages=external \
//        --outfile=dist-bench/queue-metrics-cost.mjs && node dist-bench/queue-metrics-cost.mjs
import pg from 'pg';
import { z } from 'zod/v4';
import { Queue } from '../../src/queue/queue.js';
import { queueMetricsSql } from '../../src/queue/store/queue-health.js';
import { queueStatements } from '../../src/queue/store/queue-sql.js';
import { startPostgres } from '../../src/testing/start-postgres.js';
import { TxManager } from '../../src/tx/tx-manager.js';

const RUNS = 7;

async function explain(
  pool: pg.Pool,
  sql: string,
  values: unknown[],
): Promise<{ ms: number[]; buffers: number; plan: string }> {
  const ms: number[] = [];
  let buffers = 0;
  let plan = '';
  for (let i = 0; i < RUNS; i++) {
    const { rows } = await pool.query<{
      'QUERY PLAN': [
        { 'Execution Time': number; Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number } },
      ];
    }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, values);
    const root = rows[0]?.['QUERY PLAN'][0];
    if (root === undefined) throw new Error('no plan');
    ms.push(root['Execution Time']);
    buffers = root.Plan['Shared Hit Blocks'] + root.Plan['Shared Read Blocks'];
  }
  const text = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, values);
  plan = text.rows.map((r) => r['QUERY PLAN']).join('\n');
  return { ms: ms.sort((a, b) => a - b), buffers, plan };
}

const server = await startPostgres();
const pool = new pg.Pool({ connectionString: server.url, max: 2 });
try {
  const schema = 'cost_q';
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool, { telemetry: false }),
    schema,
    tasks: { t: z.object({}) },
    telemetry: false,
  });
  (await queue.migrate())._unsafeUnwrap();
  const jobs = `${schema}.jobs`;
  await pool.query(`INSERT INTO ${jobs} (task, payload, priority, run_at)
    SELECT 't', '{}', g % 3, now() - (g || ' ms')::interval FROM generate_series(1, 600000) g`);
  await pool.query(
    `INSERT INTO ${jobs} (task, payload, run_at) SELECT 't', '{}', now() + interval '1 hour' FROM generate_series(1, 100000)`,
  );
  await pool.query(`INSERT INTO ${jobs} (task, payload, state, attempts, lease_token, lease_expires_at)
    SELECT 't', '{}', 'running', 1, gen_random_uuid(), now() + CASE WHEN g <= 50000 THEN interval '-1 minute' ELSE interval '1 hour' END
      FROM generate_series(1, 250000) g`);
  await pool.query(
    `INSERT INTO ${jobs} (task, payload, state, attempts) SELECT 't', '{}', 'dead', 5 FROM generate_series(1, 50000)`,
  );
  await pool.query(`VACUUM ANALYZE ${jobs}`);
  const metrics = await explain(pool, queueMetricsSql(schema), [10_000, schema]);
  const stats = await explain(
    pool,
    queueStatements(schema, { archive: false, channel: 'c', cancelChannel: 'c_cancel' }).stats,
    [],
  );
  const fmt = (r: { ms: number[] }) =>
    `${r.ms[Math.floor(RUNS / 2)]?.toFixed(2)} ms (min ${r.ms[0]?.toFixed(2)}, max ${r.ms[RUNS - 1]?.toFixed(2)})`;
  console.log(`PostgreSQL ${server.version}, ${jobs}: 1 000 000 rows`);
  console.log(`queue.metrics() (cap 10 000): ${fmt(metrics)}, ${metrics.buffers} buffers`);
  console.log(`queue.stats() (exact):        ${fmt(stats)}, ${stats.buffers} buffers`);
  console.log(`\n--- metrics plan\n${metrics.plan}\n\n--- stats plan\n${stats.plan}`);
} finally {
  await pool.end();
  await server.stop();
}
