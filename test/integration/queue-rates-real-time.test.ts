// Rate limits in real time, as a mail provider's quota sees them: two worker processes burn down jobs of
// a task limited to 10 per second and of a group limited to 4, across a server restart, with the rate's
// default guard. Claims are recorded by a trigger on the jobs table with the server's clock at the
// moment each job is leased, and handler starts by the handlers on the machine's clock; within any full
// second there are at most 10 of the task and 4 of the group, of either. With windows of exactly a
// second (no guard), every one of five runs had 12 to 18 starts of the task in one second.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually, mostWithin, recordClaims } from '../fixtures/queue-helpers.js';

// This file starts its own server: it restarts it.
const server: StartedPostgres = await startPostgres({ provider: 'embedded' });
const admin = new pg.Pool({ connectionString: server.url, max: 3 });
admin.on('error', () => {});
new TxManager(admin); // the README's setup: it guards the pool's idle clients across the restart
afterAll(async () => {
  await admin.end();
  await server.stop();
});
const WORKER_SCRIPT = fileURLToPath(new URL('../fixtures/queue-rates-worker.mjs', import.meta.url));
const schema = 'q_rates_rt';
const tasks = { rated: z.object({ n: z.number().int() }), grouped: z.object({ n: z.number().int() }) };

async function times(sql: string): Promise<number[]> {
  return (await admin.query<{ ms: number }>(sql)).rows.map((r) => r.ms);
}

it('two worker processes and a server restart: at most 10 claims and starts of the task, 4 of the group, in any second', async () => {
  const setup = new Queue({ pool: admin, txManager: new TxManager(admin), schema, tasks });
  (await setup.migrate())._unsafeUnwrap();
  await recordClaims(admin, schema);
  await admin.query(`CREATE TABLE ${schema}.starts (job_id bigint, task text, at double precision, by text)`);
  const rated = 60;
  const grouped = 24;
  const workers = ['w1', 'w2'].map((name) => {
    const child = spawn(process.execPath, [WORKER_SCRIPT], {
      env: { ...process.env, QUEUE_URL: server.url, QUEUE_SCHEMA: schema, WORKER_NAME: name },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    return { child, exited, listening: () => out.includes('listening') };
  });
  try {
    await eventually(() => workers.every((w) => w.listening()), 30_000);
    (
      await setup.enqueueMany(
        admin,
        'rated',
        Array.from({ length: rated }, (_, n) => ({ n })),
      )
    )._unsafeUnwrap();
    (
      await setup.enqueueMany(
        admin,
        'grouped',
        Array.from({ length: grouped }, (_, n) => ({ n })),
        { group: 'g' },
      )
    )._unsafeUnwrap();
    const started = async () =>
      (await admin.query<{ n: number }>(`SELECT count(DISTINCT job_id)::int AS n FROM ${schema}.starts`))
        .rows[0]?.n ?? 0;
    await eventually(async () => (await started()) >= (rated + grouped) / 3, 60_000);
    // The server restarts mid-way: every connection is cut; the workers reconnect and go on.
    await server.restart();
    await eventually(async () => {
      const left = await admin
        .query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.jobs`)
        .catch(() => ({
          rows: [{ n: -1 }],
        }));
      return left.rows[0]?.n === 0 && (await started()) === rated + grouped;
    }, 90_000);
  } finally {
    for (const w of workers) w.child.kill('SIGTERM');
    await Promise.all(workers.map((w) => w.exited));
  }
  const claimsOfTask = await times(
    `SELECT extract(epoch FROM at) * 1000 AS ms FROM ${schema}.claims WHERE task = 'rated'`,
  );
  const claimsOfGroup = await times(
    `SELECT extract(epoch FROM at) * 1000 AS ms FROM ${schema}.claims WHERE group_key = 'g'`,
  );
  const startsOfTask = await times(`SELECT at AS ms FROM ${schema}.starts WHERE task = 'rated'`);
  const startsOfGroup = await times(`SELECT at AS ms FROM ${schema}.starts WHERE task = 'grouped'`);
  const both = new Set(
    (await admin.query<{ by: string }>(`SELECT DISTINCT by FROM ${schema}.starts`)).rows.map((r) => r.by),
  );
  // Every count is over full windows of the declared period (1000 ms), as a user counts: claims at the
  // moment the trigger saw each job leased, starts at the moment each handler was called.
  const report = {
    claims: { task: mostWithin(claimsOfTask, 1000), group: mostWithin(claimsOfGroup, 1000) },
    starts: { task: mostWithin(startsOfTask, 1000), group: mostWithin(startsOfGroup, 1000) },
    saturated: { task: mostWithin(claimsOfTask, 1100), group: mostWithin(claimsOfGroup, 1100) },
  };
  // From each claim (trigger) to its handler's start: what the rate's guard has to cover.
  const delays = (
    await admin.query<{ ms: number }>(
      `SELECT s.at - extract(epoch FROM c.at) * 1000 AS ms
         FROM ${schema}.starts s
         JOIN LATERAL (SELECT max(at) AS at FROM ${schema}.claims c
                        WHERE c.job_id = s.job_id AND extract(epoch FROM c.at) * 1000 <= s.at + 5) c ON true
        WHERE c.at IS NOT NULL
        ORDER BY 1`,
    )
  ).rows.map((r) => Math.round(r.ms * 10) / 10);
  const q = (f: number) => delays[Math.min(delays.length - 1, Math.floor(f * delays.length))];
  console.log('claim to start (ms): min', delays[0], 'median', q(0.5), 'p95', q(0.95), 'max', delays.at(-1));
  console.log('most within a second', JSON.stringify(report), 'started by', [...both]);
  expect(both).toEqual(new Set(['w1', 'w2'])); // both processes claimed
  expect(claimsOfTask.length).toBeGreaterThanOrEqual(rated);
  // The burn-down kept the windows full (the limit within `per + guard`, 1100 ms: so the test can fail),
  // and never went over the limits.
  expect(report.saturated.task).toBeGreaterThanOrEqual(10);
  expect(report.saturated.group).toBeGreaterThanOrEqual(4);
  expect(report.claims.task).toBeLessThanOrEqual(10);
  expect(report.claims.group).toBeLessThanOrEqual(4);
  // Starts are promised while the delays from claim to start differ by less than the guard (100 ms by
  // default): held to it whenever this run met that condition. A machine loaded past it (the spread is
  // printed above) voids the promise for starts, as the docs say, and leaves the claims' assertions.
  const spread = (delays.at(-1) ?? 0) - (delays[0] ?? 0);
  if (spread < 100) {
    expect(report.starts.task).toBeLessThanOrEqual(10);
    expect(report.starts.group).toBeLessThanOrEqual(4);
  } else {
    console.warn(`claim-to-start delays spread ${spread} ms, over the 100 ms guard: starts not held`);
  }
}, 180_000);
