// The claim benchmarks' one measuring loop and their one report: claims on one connection until the queue is empty, deleting
// each batch, and counts the backend's CPU (from /proc) of the claim statements only.
import { loadavg } from 'node:os';
import { jobsFromClaim, RAW_TEXT } from '../../dist/queue/job.js';
import { backendCpuUs } from './server-cpu.mjs';
import { span } from './stats.mjs';

/**
 * The backend CPU µs per claim statement of `query` ({ text, values }) on a new connection of `pool`,
 * claiming until it returns no job. `ids(rows)` reads the claimed ids of a result (default: the worker's
 * row of aggregates); `afterBatch(client)` runs after each batch's DELETE, outside the measurement. The
 * connection is closed afterwards, so that the next round plans its statements afresh.
 *
 * @example
 * const us = await cpuPerClaim(pool, { text: s.claim, values: [8, 30_000, ['noop']] });
 */
export async function cpuPerClaim(pool, query, { ids = aggregatedIds, afterBatch } = {}) {
  const client = await pool.connect();
  try {
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    let cpu = 0;
    let claims = 0;
    for (;;) {
      const before = backendCpuUs(pid);
      const r = await client.query({ ...query, rowMode: 'array', types: RAW_TEXT });
      cpu += backendCpuUs(pid) - before;
      const claimed = ids(r.rows);
      if (claimed.length === 0) break;
      claims++;
      await client.query('DELETE FROM q.jobs WHERE id = ANY($1::bigint[])', [claimed]);
      await afterBatch?.(client);
    }
    return cpu / claims;
  } finally {
    client.release(true);
  }
}

/** The ids of the worker's row of aggregates (claimed-aggregates.ts). */
const aggregatedIds = (rows) => jobsFromClaim(rows[0]).map((j) => j.id);

/**
 * Prints `results` (name → each round's µs per claim) as a markdown table whose first row is `header`
 * (its last cell the figure's), then what the rounds ran on: `jobs` per round, `rounds`, the load average
 * from `load0` to now.
 *
 * @example
 * printClaimTable(['claim of 8 jobs', 'backend CPU µs per claim: median (min–max)'], results, { jobs, rounds, load0 });
 */
export function printClaimTable(header, results, { jobs, rounds, load0 }) {
  console.log(`| ${header.join(' | ')} |`);
  console.log(`|${header.map((_, i) => (i === header.length - 1 ? '---:' : '---')).join('|')}|`);
  for (const [name, xs] of results) console.log(`| ${name} | ${span(xs, 0)} |`);
  console.log(
    `\n${jobs} jobs per round, one connection, ${rounds} interleaved rounds; load average ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
  );
}
