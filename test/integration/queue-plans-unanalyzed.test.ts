// The queue's plans on a table that was never ANALYZEd: a freshly migrated queue given a backlog runs
// before autovacuum's first ANALYZE, with no statistics at all. Every statement a worker sends while it
// burns the backlog down (the claim with the statements inside its functions, the completions, the
// reaper every 200 ms; no heartbeat: no-op jobs end long before a lease is a third old) must reach the
// jobs through an index, never a sequential scan of the backlog. Checked on the PLANS the
// server chose while a real worker burns the backlog down (auto_explain, sent to the client as NOTICEs),
// never on times.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();

const BACKLOG = 20_000;

/**
 * A pool whose sessions send the plan of every statement they run, nested ones included (the claim's
 * functions), to the client: the plans are collected in `plans`.
 */
function explainingPool(): { pool: pg.Pool; plans: string[] } {
  const plans: string[] = [];
  // auto_explain loaded at each session's start (a superuser's startup options), before any statement.
  const explaining = new pg.Pool({
    connectionString: url,
    max: 10,
    options: [
      '-c session_preload_libraries=auto_explain',
      '-c auto_explain.log_min_duration=0',
      '-c auto_explain.log_nested_statements=on',
      '-c auto_explain.log_level=notice',
    ].join(' '),
  });
  explaining.on('connect', (client) => {
    client.on('notice', (notice) => {
      // The plan without its parameters (a completion's are 500 ids and tokens).
      if (notice.message?.includes('Query Text:') === true)
        plans.push(notice.message.replace(/Query Parameters:[^\n]*\n/, ''));
    });
  });
  return { pool: explaining, plans };
}

/** The plans' nodes that read the jobs table sequentially. */
const seqScansOfJobs = (plans: readonly string[]) =>
  plans.flatMap((p) => p.match(/Seq Scan on jobs\b[^\n]*/g) ?? []);

/** A never-analyzed queue in `schema` with BACKLOG ready jobs (spread over `groups` groups if > 0). */
async function freshQueueWithBacklog(schema: string, groups: number) {
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    schema,
    tasks: { noop: z.object({}) },
    ...(groups > 0 ? { groups: { default: { concurrency: 2 } } } : {}),
  });
  (await queue.migrate())._unsafeUnwrap();
  // The condition under test, made certain: autovacuum must not ANALYZE the table during the test.
  await pool.query(`ALTER TABLE ${schema}.jobs SET (autovacuum_enabled = off)`);
  for (let done = 0; done < BACKLOG; done += 5000) {
    const chunk = Array.from({ length: 5000 }, () => ({}));
    const keys = chunk.map((_, i) => `g${(done + i) % groups}`);
    (await queue.enqueueMany(pool, 'noop', chunk, groups > 0 ? { groups: keys } : {}))._unsafeUnwrap();
  }
  return queue;
}

/** Burns the backlog down with a worker (concurrency 8) on `workerPool`, as a user's worker runs. */
async function burnDown(schema: string, groups: number, workerPool: pg.Pool): Promise<void> {
  const queue = new Queue({
    pool: workerPool,
    txManager: new TxManager(workerPool),
    schema,
    tasks: { noop: z.object({}) },
    ...(groups > 0 ? { groups: { default: { concurrency: 2 } } } : {}),
  });
  let ran = 0;
  let allRan = () => {};
  const done = new Promise<void>((resolve) => {
    allRan = resolve;
  });
  const worker = queue.work(
    {
      noop: () => {
        ran++;
        if (ran === BACKLOG) allRan();
      },
    },
    { concurrency: 8, reapInterval: 200 },
  );
  await done;
  await worker.stop();
}

/** Whether the jobs table of `schema` is still without statistics (never analyzed, no reltuples). */
async function neverAnalyzed(schema: string) {
  const r = await pool.query<{ reltuples: number; analyzed: number }>(
    `SELECT c.reltuples, (s.analyze_count + s.autoanalyze_count)::int AS analyzed
       FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
      WHERE c.oid = to_regclass($1)`,
    [`${schema}.jobs`],
  );
  return r.rows[0];
}

describe('queue plans on a never-analyzed table with a backlog', () => {
  it('the worker of a queue without limits: every statement reaches jobs through an index', async () => {
    await freshQueueWithBacklog('plan_q', 0);
    const { pool: workerPool, plans } = explainingPool();
    try {
      await burnDown('plan_q', 0, workerPool);
    } finally {
      await workerPool.end();
    }
    expect(await neverAnalyzed('plan_q')).toEqual({ reltuples: -1, analyzed: 0 });
    expect(seqScansOfJobs(plans)).toEqual([]);
    // The claim inside claim_jobs walks jobs_claimable in order. The completion (inside complete_jobs)
    // reads jobs_pkey for its ids, the only plan its settings leave, with statistics or without.
    const claims = plans.filter(
      (p) => /FOR UPDATE SKIP LOCKED/.test(p) && /ORDER BY priority, run_at, id/.test(p),
    );
    expect(claims.length).toBeGreaterThan(0);
    for (const p of claims) expect(p).toMatch(/Index Scan using jobs_claimable on jobs/);
    const completions = plans.filter((p) => /DELETE FROM "plan_q"\.jobs j\s+USING unnest/.test(p));
    expect(completions.length).toBeGreaterThan(0);
    for (const p of completions) expect(p).toMatch(/Index Scan using jobs_pkey on jobs j/);
  });

  it("the API's own statements on the backlog: enqueue, claim, heartbeat, fail, release, cancel", async () => {
    await freshQueueWithBacklog('plan_api', 0);
    const { pool: explaining, plans } = explainingPool();
    try {
      const queue = new Queue({
        pool: explaining,
        txManager: new TxManager(explaining),
        schema: 'plan_api',
        tasks: { noop: z.object({}) },
      });
      (await queue.enqueue(explaining, 'noop', {}))._unsafeUnwrap();
      const jobs = (await queue.claim({ batch: 8 }))._unsafeUnwrap();
      expect(jobs).toHaveLength(8);
      (await queue.extendMany(jobs))._unsafeUnwrap();
      const [first, second, ...rest] = jobs;
      if (first === undefined || second === undefined) throw new Error('claimed fewer than 2 jobs');
      (await queue.fail(first, new Error('boom')))._unsafeUnwrap();
      (await queue.release(rest))._unsafeUnwrap();
      (await queue.cancel(second.id))._unsafeUnwrap();
    } finally {
      await explaining.end();
    }
    expect(await neverAnalyzed('plan_api')).toEqual({ reltuples: -1, analyzed: 0 });
    for (const statement of [
      /INSERT INTO "plan_api"\.jobs/,
      /UPDATE "plan_api"\.jobs j\s+SET lease_expires_at/,
      /DELETE FROM "plan_api"\.jobs j WHERE j\.id = \$1/,
    ])
      expect(plans.some((p) => statement.test(p))).toBe(true);
    expect(seqScansOfJobs(plans)).toEqual([]);
  });

  it('the worker of a queue with groups (the limited claim, the completion that takes over slots)', async () => {
    await freshQueueWithBacklog('plan_g', 100);
    const { pool: workerPool, plans } = explainingPool();
    try {
      await burnDown('plan_g', 100, workerPool);
    } finally {
      await workerPool.end();
    }
    expect(await neverAnalyzed('plan_g')).toEqual({ reltuples: -1, analyzed: 0 });
    expect(plans.some((p) => /claim_jobs_limited/.test(p))).toBe(true);
    expect(seqScansOfJobs(plans)).toEqual([]);
  });

  it('control: a statement that does read the whole table is seen (stats() counts every job)', async () => {
    const { pool: explaining, plans } = explainingPool();
    try {
      const queue = new Queue({
        pool: explaining,
        txManager: new TxManager(explaining),
        schema: 'plan_c',
        tasks: { noop: z.object({}) },
      });
      (await queue.migrate())._unsafeUnwrap();
      (await queue.enqueueMany(explaining, 'noop', [{}, {}]))._unsafeUnwrap();
      (await queue.stats())._unsafeUnwrap();
    } finally {
      await explaining.end();
    }
    expect(seqScansOfJobs(plans).length).toBeGreaterThan(0);
  });
});
