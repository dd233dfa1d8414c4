import { type ChildProcess, fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { seededRandom } from '../fixtures/seeded-random.mjs';
import { useTestDatabase } from '../helpers.js';

// N worker processes burn down JOBS jobs while the test SIGKILLs workers at random, terminates their
// backends (pg_terminate_backend) and drops every connection through a FaultProxy. At the end every
// job is done (its effect written exactly once) or dead exactly as its handler decided: 0 lost, 0
// completed twice, 0 expired leases left.
const JOBS = Number(process.env.QUEUE_RELIABILITY_JOBS ?? 20_000);
const WORKERS = 4;
const FAIL_EVERY = 20; // job n with n % 20 === 0 always fails → must end dead
const LIMIT_MS = 100_000;
const SCHEMA = 'q_rel';
const WORKER_SCRIPT = fileURLToPath(new URL('../fixtures/queue-reliability-worker.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

const { pool, url } = await useTestDatabase();
const proxy = await FaultProxy.start({ target: url });
afterAll(() => proxy.close());

it(`${JOBS} jobs, ${WORKERS} worker processes, SIGKILLs + terminated backends + dropped connections: 0 lost, 0 twice`, {
  timeout: LIMIT_MS + 30_000,
}, async () => {
  expect(existsSync(DIST), 'dist/index.js is missing: run `npm run build` first').toBe(true);
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema: SCHEMA,
    archive: true,
    tasks: { job: z.object({ n: z.number().int(), fail: z.boolean() }) },
  });
  (await queue.migrate())._unsafeUnwrap();
  await pool.query(`CREATE TABLE ${SCHEMA}.effects (n int PRIMARY KEY, attempt int NOT NULL)`);
  await pool.query(`CREATE TABLE ${SCHEMA}.violations (n int NOT NULL)`);
  const ok: { n: number; fail: boolean }[] = [];
  const bad: { n: number; fail: boolean }[] = [];
  for (let n = 0; n < JOBS; n++) (n % FAIL_EVERY === 0 ? bad : ok).push({ n, fail: n % FAIL_EVERY === 0 });
  const backoff = { baseMs: 10, capMs: 200 };
  (await queue.enqueueMany(pool, 'job', ok, { maxAttempts: 1000, backoff }))._unsafeUnwrap();
  (await queue.enqueueMany(pool, 'job', bad, { maxAttempts: 2, backoff }))._unsafeUnwrap();

  const seed = Number(process.env.QUEUE_RELIABILITY_SEED ?? Date.now() % 100_000);
  const rnd = seededRandom(seed);
  const children = new Set<ChildProcess>();
  let finishing = false;
  const chaos = { sigkill: 0, terminated: 0, drops: 0, respawns: 0 };
  const spawn = () => {
    const child = fork(WORKER_SCRIPT, [], {
      env: { ...process.env, QUEUE_URL: proxy.url, QUEUE_SCHEMA: SCHEMA },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    child.stderr?.resume();
    children.add(child);
    child.on('exit', () => {
      children.delete(child);
      if (!finishing) {
        chaos.respawns++;
        spawn();
      }
    });
  };
  for (let i = 0; i < WORKERS; i++) spawn();

  const started = Date.now();
  const remaining = async () => {
    const r = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${SCHEMA}.jobs WHERE state IN ('pending', 'running')`,
    );
    return r.rows[0]?.n ?? -1;
  };
  let left = JOBS;
  let tick = 0;
  while (left > 0 && Date.now() - started < LIMIT_MS) {
    await new Promise((resolve) => setTimeout(resolve, 400 + rnd() * 600));
    tick++;
    // Chaos only while most of the work is still ahead, then let the survivors finish.
    if (left > JOBS * 0.05) {
      const action = rnd();
      if (action < 0.3) {
        const victims = [...children];
        const victim = victims[Math.floor(rnd() * victims.length)];
        if (victim?.kill('SIGKILL')) chaos.sigkill++;
      } else if (action < 0.6) {
        const r = await pool.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                AND application_name = '' ORDER BY random() LIMIT 2`,
        );
        chaos.terminated += r.rowCount ?? 0;
      } else if (action < 0.75) {
        proxy.dropAll();
        chaos.drops++;
      }
    }
    if (tick % 4 === 0) left = await remaining();
  }
  left = await remaining();
  finishing = true;
  await Promise.all(
    [...children].map(
      (child) =>
        new Promise<void>((resolve) => {
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
        }),
    ),
  );
  const elapsed = Date.now() - started;

  const effects = await pool.query<{ n: number; ok: boolean }>(
    `SELECT count(*)::int AS n FROM ${SCHEMA}.effects`,
  );
  const badEffects = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${SCHEMA}.effects WHERE n % ${FAIL_EVERY} = 0`,
  );
  const violations = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}.violations`);
  const archive = await pool.query<{ n: number; distinct_ids: number; mismatched: number }>(
    `SELECT count(*)::int AS n, count(DISTINCT id)::int AS distinct_ids,
              count(*) FILTER (WHERE (payload->>'fail')::boolean OR state <> 'done')::int AS mismatched
         FROM ${SCHEMA}.jobs_archive`,
  );
  const dead = await pool.query<{ n: number; mismatched: number }>(
    `SELECT count(*)::int AS n, count(*) FILTER (WHERE NOT (payload->>'fail')::boolean)::int AS mismatched
         FROM ${SCHEMA}.jobs WHERE state = 'dead'`,
  );
  const missing = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM generate_series(0, $1 - 1) AS g(n)
        WHERE NOT EXISTS (SELECT 1 FROM ${SCHEMA}.jobs_archive a WHERE (a.payload->>'n')::int = g.n)
          AND NOT EXISTS (SELECT 1 FROM ${SCHEMA}.jobs j WHERE (j.payload->>'n')::int = g.n AND j.state = 'dead')`,
    [JOBS],
  );
  const stats = (await queue.stats())._unsafeUnwrap();
  console.log(
    `queue reliability: ${JOBS} jobs, ${WORKERS} workers, ${elapsed} ms, seed ${seed}; chaos ${JSON.stringify(chaos)}; ` +
      `effects ${effects.rows[0]?.n}, archived ${archive.rows[0]?.n}, dead ${dead.rows[0]?.n}, stats ${JSON.stringify(stats)}`,
  );
  expect(left, `jobs still pending/running after ${LIMIT_MS} ms (seed ${seed})`).toBe(0);
  expect(chaos.sigkill + chaos.terminated + chaos.drops).toBeGreaterThan(0);
  expect(effects.rows[0]?.n).toBe(ok.length); // every successful job's effect, once (primary key)
  expect(badEffects.rows[0]?.n).toBe(0);
  expect(violations.rows[0]?.n).toBe(0); // no job ran to completion twice
  expect(archive.rows[0]).toEqual({ n: ok.length, distinct_ids: ok.length, mismatched: 0 });
  expect(dead.rows[0]).toEqual({ n: bad.length, mismatched: 0 });
  expect(missing.rows[0]?.n).toBe(0); // 0 lost
  expect(stats).toMatchObject({ pending: 0, running: 0, expired: 0, dead: bad.length });
});
