// The completion that takes over a serial group's next job (complete_take_next), this version's body
// against migration 0010's, on ONE table (interleaved calls): schema `q` at the newest version
// (filled-queue.mjs) with 1,200 serial groups (concurrency 1) of PER jobs each (VACUUM ANALYZE), one job
// of every group claimed, the groups split between the two bodies. Each round, each body completes its running jobs and takes
// over their groups' next ones (in turns, the order alternating), until the groups are nearly empty: the
// entries the jobs taken leave behind in the indexes grow as in a burn-down, for both alike. Reported:
// the backend's CPU per job of each body (its own connection, from /proc), and the median over the rounds
// of each call's time per job divided by the 0010 body's in the same round.
// Run: npm run build && node bench/queue/take-over-variants.mjs   (PER, default 80)
import { loadavg } from 'node:os';
import pg from 'pg';
import { QUEUE_MIGRATIONS } from '../../dist/queue/schema/queue-migrations.generated.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { filledQueue } from './filled-queue.mjs';
import { backendCpuUs } from './server-cpu.mjs';

const GROUPS = 1200;
const PER = Number(process.env.PER ?? 80);
const LIMITS = JSON.stringify({ default: { concurrency: 1 } });
const load0 = loadavg()[0];
const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'takevar' });
const pool = new pg.Pool({ connectionString: db.url, max: 4 });
try {
  // Migration 0010's body, as complete_take_next_0010: its frozen text, renamed.
  const m10 = QUEUE_MIGRATIONS.find((m) => m.version === 10);
  if (m10 === undefined) throw new Error('no migration 0010');
  await filledQueue(pool, {
    jobs: GROUPS * PER,
    groups: GROUPS,
    sql: m10.sql
      .replaceAll('{{schema}}.complete_take_next(', '{{schema}}.complete_take_next_0010(')
      .replaceAll('{{schema}}', '"q"')
      .replaceAll('{{channel}}', "'q_jobs'"),
  });
  const claimed = await pool.query(
    `SELECT (x.job).id::text AS id, (x.job).lease_token::text AS token
       FROM q.claim_jobs_limited($1::int, 600000, '{noop}', $2::jsonb) x WHERE (x.job).id IS NOT NULL`,
    [GROUPS, LIMITS],
  );
  const bodies = [
    { name: 'migration 0010', fn: 'complete_take_next_0010' },
    { name: 'this version', fn: 'complete_take_next' },
  ];
  const half = claimed.rows.length / 2;
  for (const [i, b] of bodies.entries()) {
    b.running = claimed.rows.slice(i * half, (i + 1) * half);
    b.client = await pool.connect();
    b.pid = (await b.client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    b.times = [];
    b.cpuUs = 0;
    b.jobs = 0;
  }
  for (let round = 0; round < PER - 2; round++) {
    for (const b of round % 2 === 0 ? bodies : [...bodies].reverse()) {
      const cpu0 = backendCpuUs(b.pid);
      const t0 = performance.now();
      const r = await b.client.query(
        `SELECT r.done, r.heads FROM q.${b.fn}($1::bigint[], $2::uuid[], 600000, '{noop}', $3::jsonb, $4::int, false) r`,
        [b.running.map((j) => j.id), b.running.map((j) => j.token), LIMITS, b.running.length],
      );
      const ms = performance.now() - t0;
      const heads = (r.rows[0].heads ?? '').split(';').filter((h) => h !== '');
      if (r.rows[0].done.length !== b.running.length || heads.length !== b.running.length)
        throw new Error(
          `${b.name}: completed ${r.rows[0].done.length}, took ${heads.length} of ${b.running.length}`,
        );
      if (round >= 2) {
        b.times.push(ms / b.running.length);
        b.cpuUs += backendCpuUs(b.pid) - cpu0;
        b.jobs += b.running.length;
      }
      b.running = heads.map((h) => {
        const f = h.split(',');
        return { id: f[0], token: f[5] };
      });
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const [base] = bodies;
  for (const b of bodies) {
    const ratios = b.times.map((t, i) => t / base.times[i]);
    console.log(
      `${b.name.padEnd(16)} backend CPU ${(b.cpuUs / b.jobs).toFixed(1)} µs/job; call time per job ÷ 0010's, ` +
        `median of ${ratios.length} rounds: ${median(ratios).toFixed(3)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`,
    );
    b.client.release();
  }
  console.log(`${GROUPS} serial groups × ${PER} jobs; load ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`);
} finally {
  await pool.end();
  await db.drop();
  await server.stop();
}
