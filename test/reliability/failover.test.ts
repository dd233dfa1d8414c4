import { EventEmitter } from 'node:events';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { z } from 'zod';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { Queue } from '../../src/queue/index.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';
import type { StartedStandby } from '../../src/testing/start-standby.js';
import { TxManager } from '../../src/tx/tx-manager.js';

// Failover to a promoted standby while a mixed workload runs through a FaultProxy (the DNS name / the
// virtual IP of a managed Postgres): transfers in several lanes, queue jobs whose effect is written with
// their fenced completion, and a SessionLock holder. The failover is a switchover as Patroni or RDS
// Multi-AZ do it, in the order a stale DNS answer makes worst: the name moves to the standby BEFORE it is
// promoted (every connection is cut; new ones reach a read-only server and writes get 25006), the
// standby replays what the old primary acknowledged, is promoted, and the same name now reaches a
// writable primary. Checked on the promoted server: money conserved, every acknowledged transfer
// there, no transfer that was not attempted, every job's effect exactly once, the lock reported lost.
const LANES = Number(process.env.FAILOVER_LANES ?? 4);
const JOBS = Number(process.env.FAILOVER_JOBS ?? 400);
const ACCOUNTS = 20;
const INITIAL = 1000;

const primary: StartedPostgres = await startPostgres({ provider: 'embedded' });
const standby: StartedStandby = await primary.startStandby();
const proxy = await FaultProxy.start({ target: primary.url });
const pools: pg.Pool[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
  await proxy.close();
  await standby.stop();
  await primary.stop();
});

it('failover to a promoted standby: retried or CommitOutcomeUnknown, 25006 retried on fresh connections, jobs exactly once, SessionLock lost', {
  timeout: 180_000,
}, async () => {
  const admin = new pg.Pool({ connectionString: primary.url, max: 2 });
  pools.push(admin);
  await admin.query(`
    CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
    CREATE TABLE ledger (id text PRIMARY KEY, amount int NOT NULL);
    CREATE TABLE effects (n int PRIMARY KEY, attempt int NOT NULL);
    CREATE TABLE violations (n int NOT NULL);
  `);
  await admin.query('INSERT INTO accounts SELECT g, $1 FROM generate_series(1, $2) g', [INITIAL, ACCOUNTS]);

  // The application, as the README sets it up: a pool on the service's URL (the proxy), a TxManager.
  const pool = new pg.Pool({ connectionString: proxy.url, max: 12, connectionTimeoutMillis: 5000 });
  pools.push(pool);
  const retries: Record<string, number> = {};
  const progress = new EventEmitter();
  progress.setMaxListeners(0);
  const tm = new TxManager(pool, {
    defaults: { maxAttempts: 100, deadline: '60s', backoff: { baseMs: 5, capMs: 200 } },
    hooks: {
      onRetry: ({ error }) => {
        retries[error.kind] = (retries[error.kind] ?? 0) + 1;
        progress.emit('tick');
      },
    },
  });
  /** What the run has done so far (in the failure message of a phase that never completes). */
  let state = (): string => '';
  /**
   * Resolves once `condition()` holds, re-checked on every event of the workload (no sleeps). A phase
   * that never completes fails the test with the run's state instead of hanging until its timeout.
   */
  const until = (phase: string, condition: () => boolean): Promise<void> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        progress.off('tick', check);
        reject(new Error(`phase "${phase}" did not complete: ${state()}`));
      }, 60_000);
      const check = () => {
        if (!condition()) return;
        clearTimeout(timer);
        progress.off('tick', check);
        resolve();
      };
      progress.on('tick', check);
      check();
    });

  const queue = new Queue({
    pool,
    txManager: tm,
    schema: 'failover_q',
    tasks: { job: z.object({ n: z.number().int() }) },
  });
  (await queue.migrate())._unsafeUnwrap();
  const payloads = Array.from({ length: JOBS }, (_, n) => ({ n }));
  (
    await queue.enqueueMany(pool, 'job', payloads, { maxAttempts: 1000, backoff: { baseMs: 10, capMs: 200 } })
  )._unsafeUnwrap();

  // `outcomeUnknown`: the job's transaction (effect + fenced completion) got CommitOutcomeUnknown; it
  // either committed (the job is done) or not (the job runs again) — the database says which, at the end.
  const jobs = { effects: 0, outcomeUnknown: 0, handlerErrors: 0 };
  const workerErrors: string[] = [];
  const worker = queue.work(
    {
      job: async (job, ctx) => {
        const r = await ctx.transaction((tx) =>
          tx.query('INSERT INTO effects (n, attempt) VALUES ($1, $2)', [job.payload.n, job.attempts]),
        );
        if (r.isErr()) {
          jobs.handlerErrors++;
          if (r.error.kind === 'CommitOutcomeUnknown') {
            jobs.outcomeUnknown++;
            progress.emit('tick');
          }
          if (r.error.kind === 'UniqueViolation') {
            await pool.query('INSERT INTO violations (n) VALUES ($1)', [job.payload.n]).catch(() => {});
          }
          throw r.error;
        }
        jobs.effects++;
        progress.emit('tick');
      },
    },
    {
      concurrency: 4,
      batch: 4,
      lease: 5000,
      reapInterval: 250,
      pollInterval: 100,
      hooks: {
        onError: (error, phase) =>
          void workerErrors.push(`${phase}:${String((error as { kind?: string }).kind)}`),
      },
    },
  );

  const lock = (
    await SessionLock.acquire(pool, advisoryKey('failover', 'leader'), {
      checkEvery: '200ms',
      pooler: 'direct',
    })
  )._unsafeUnwrap();
  lock.lost.addEventListener('abort', () => progress.emit('tick'));

  // Transfer lanes: each transfer writes a ledger row with a unique id; the outcome the caller got is kept.
  const acknowledged = new Set<string>();
  const unknown = new Set<string>();
  const outcomes: Record<string, number> = {};
  let stopping = false;
  let promoted = false;
  let committedAfterPromotion = 0;
  const lane = async (laneId: number) => {
    for (let i = 0; !stopping; i++) {
      const id = `${laneId}-${i}`;
      const from = 1 + ((laneId * 7 + i) % ACCOUNTS);
      const to = 1 + ((laneId * 11 + i * 3 + 1) % ACCOUNTS);
      if (from === to) continue;
      const result = await tm.do(async (tx) => {
        await tx.query('UPDATE accounts SET balance = balance - 1 WHERE id = $1', [from]);
        await tx.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [to]);
        await tx.query('INSERT INTO ledger (id, amount) VALUES ($1, 1)', [id]);
      });
      const kind = result.isOk() ? 'ok' : result.error.kind;
      outcomes[kind] = (outcomes[kind] ?? 0) + 1;
      if (result.isOk()) {
        acknowledged.add(id);
        if (promoted) committedAfterPromotion++;
      } else if (kind === 'CommitOutcomeUnknown') {
        unknown.add(id);
      }
      progress.emit('tick');
    }
  };
  const lanes = Array.from({ length: LANES }, (_, l) => lane(l));
  state = () =>
    JSON.stringify({
      acknowledged: acknowledged.size,
      outcomes,
      effects: jobs.effects,
      retries,
      promoted,
      lock: lock.lostReason,
      workerErrors: workerErrors.slice(-5),
    });

  // 1. The workload runs on the primary.
  await until('on the primary', () => acknowledged.size >= 50 && jobs.effects >= 50);
  // 2. The name moves to the standby before it is promoted: every connection is cut, new ones are read-only.
  const faults = { retarget: 0, dropAll: 0, promote: 0 };
  // Slow round trips first, so that the cut finds statements — COMMITs among them — on the wire.
  proxy.latency(10);
  const inFlight = acknowledged.size;
  await until('slow round trips', () => acknowledged.size >= inFlight + LANES);
  proxy.retarget(standby.url);
  faults.retarget++;
  faults.dropAll += proxy.dropAll() > 0 ? 1 : 0;
  proxy.latency(0);
  await until('writes refused by the standby', () => (retries.ReadOnlyTransaction ?? 0) >= 10);
  await until('SessionLock lost', () => lock.lost.aborted);
  // 3. The standby replays everything the old primary acknowledged (a switchover), and is promoted.
  await standby.caughtUp();
  await standby.promote();
  promoted = true;
  faults.promote++;
  // 4. The same name now reaches a writable primary: the workload goes on, the queue drains.
  await until(
    'after the promotion',
    () => committedAfterPromotion >= 50 && jobs.effects + jobs.outcomeUnknown >= JOBS,
  );
  stopping = true;
  await Promise.all(lanes);
  // The queue drains: what is still pending or running is a job whose outcome was unknown and did not commit.
  const drainStarted = Date.now();
  let stats = (await queue.stats())._unsafeUnwrap();
  while (stats.pending + stats.running > 0 && Date.now() - drainStarted < 60_000) {
    await new Promise((r) => setTimeout(r, 50));
    stats = (await queue.stats())._unsafeUnwrap();
  }
  await worker.stop();

  // Checks, on the promoted server.
  const promotedPool = new pg.Pool({ connectionString: standby.url, max: 2 });
  pools.push(promotedPool);
  const anomalies: string[] = [];
  const money = await promotedPool.query<{ total: number }>(
    'SELECT sum(balance)::int AS total FROM accounts',
  );
  if (money.rows[0]?.total !== ACCOUNTS * INITIAL) anomalies.push(`money: ${money.rows[0]?.total}`);
  const ledger = new Set(
    (await promotedPool.query<{ id: string }>('SELECT id FROM ledger')).rows.map((r) => r.id),
  );
  for (const id of acknowledged) if (!ledger.has(id)) anomalies.push(`acknowledged transfer ${id} lost`);
  for (const id of ledger) {
    if (!acknowledged.has(id) && !unknown.has(id))
      anomalies.push(`transfer ${id} committed but reported failed`);
  }
  const effects = await promotedPool.query<{ n: number; distinct: number }>(
    'SELECT count(*)::int AS n, count(DISTINCT n)::int AS distinct FROM effects',
  );
  if (effects.rows[0]?.n !== JOBS) anomalies.push(`job effects: ${effects.rows[0]?.n} of ${JOBS}`);
  const twice = await promotedPool.query<{ n: number }>('SELECT count(*)::int AS n FROM violations');
  if (twice.rows[0]?.n !== 0) anomalies.push(`jobs completed twice: ${twice.rows[0]?.n}`);
  if (stats.pending + stats.running + stats.dead !== 0)
    anomalies.push(`queue not drained: ${JSON.stringify(stats)}`);
  if (lock.lostReason === undefined) anomalies.push('SessionLock did not report lost');
  const recovery = await promotedPool.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r');
  if (recovery.rows[0]?.r !== false) anomalies.push('the standby is still in recovery');

  const transactions = Object.values(outcomes).reduce((a, b) => a + b, 0);
  console.log(
    `failover: transactions=${transactions} ${JSON.stringify(outcomes)} acknowledged=${acknowledged.size} ` +
      `unknown=${unknown.size} (committed ${[...unknown].filter((id) => ledger.has(id)).length}) ` +
      `after-promotion=${committedAfterPromotion} jobs=${JOBS} effects=${effects.rows[0]?.n} ` +
      `job-outcome-unknown=${jobs.outcomeUnknown} handler-errors=${jobs.handlerErrors} worker-errors=${workerErrors.length} retries=${JSON.stringify(retries)} ` +
      `faults=${JSON.stringify(faults)} lock=${lock.lostReason} anomalies=${anomalies.length}`,
  );
  expect(anomalies).toEqual([]);
  expect(retries.ReadOnlyTransaction ?? 0).toBeGreaterThan(0);
  expect(committedAfterPromotion).toBeGreaterThanOrEqual(50);
  // No transfer gave up: each one either committed, or was reported CommitOutcomeUnknown.
  expect(Object.keys(outcomes).filter((k) => k !== 'ok' && k !== 'CommitOutcomeUnknown')).toEqual([]);
});
