// The mixed-workload reliability harness: several worker processes (test/fixtures/reliability-worker.mjs)
// run transfers, bookings, idempotent payments, singleRun and queue jobs through a FaultProxy while this
// process injects faults (pg_terminate_backend, dropAll, stall/resume, SIGKILL + respawn, a full server
// restart; the workers add statement timeouts themselves). Then it drains the queue, checks for leaks
// (idle-in-transaction sessions, advisory locks, checked-out clients, unhandled rejections) and checks
// the data (money conserved, no overlapping booking, each idempotent/singleRun/job effect exactly once).
// It also records the history of the transfers, payments and singleRun reports (what each transaction
// attempt read and wrote, and how it ended: history-journal.mjs) and checks it with checkHistory at
// SERIALIZABLE with session order, what those patterns promise; `naive: true` runs the transfers
// without the manager's protection (the naive control, which the checker must catch).
//
// Plain JavaScript on the BUILT package (dist/) so that both the vitest file
// (test/reliability/mixed-workload.test.ts) and `npm run soak` (scripts/soak.mjs) run the same code.
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { z } from 'zod';
import {
  Bookings,
  IdempotencyKeys,
  listAdvisoryLocks,
  lockReport,
  migrateSingleRun,
  Queue,
  TxManager,
} from '../../../dist/index.js';
import { checkHistory, FaultProxy } from '../../../dist/testing/index.js';
import { seededRandom } from '../../fixtures/seeded-random.mjs';
import { readHistory } from './history-journal.mjs';

const WORKER_SCRIPT = fileURLToPath(new URL('../../fixtures/reliability-worker.mjs', import.meta.url));
const FAULT_KINDS = ['terminate', 'dropAll', 'stall', 'sigkill', 'restart'];
const INITIAL_BALANCE = 1000;
const FAIL_EVERY = 25; // job n with n % 25 === 0 always fails → must end dead, without an effect

/** Sizes and knobs; every one can be set from the environment by {@link optionsFromEnv}. */
export const DEFAULTS = Object.freeze({
  workers: 3,
  lanes: 4,
  queueConcurrency: 4,
  poolMax: 10,
  /** Stop the workload after this many operations (transactions) in total … */
  transactions: 1_000_000,
  /** … or after this long, whichever comes first. */
  durationMs: 40_000,
  /** Queue jobs enqueued by the harness during the run (plus one audit job per committed transfer). */
  jobs: 3_000,
  /** Top up the queue only while fewer jobs than this are pending or running. */
  backlog: 10_000,
  accounts: 40,
  rooms: 6,
  bookingHours: 300,
  paymentKeys: 3_000,
  singleRunKeys: 1_500,
  /** Pause between two faults: uniform in [min, max] ms. */
  faultMinMs: 400,
  faultMaxMs: 1_200,
  /** Most server restarts in a run, and the least time between two. */
  restarts: 1,
  restartEveryMs: 20_000,
  /** Longest stall of the proxy. */
  stallMaxMs: 1_500,
  /** Slot 0 is never SIGKILLed (so the soak has one uninterrupted RSS series). */
  spareSlot0: false,
  drainTimeoutMs: 60_000,
  reportEveryMs: 1_000,
  sampleEveryMs: 5_000,
  seed: 0,
  /** Record the history of transfers, payments and singleRun reports and check it (checkHistory); 0/1 from the environment. */
  history: true,
  /** The naive control: transfers read with a plain SELECT at READ COMMITTED, no row lock, no retry. */
  naive: false,
});

const ENV_NAMES = {
  workers: 'RELIABILITY_WORKERS',
  lanes: 'RELIABILITY_LANES',
  queueConcurrency: 'RELIABILITY_QUEUE_CONCURRENCY',
  transactions: 'RELIABILITY_TRANSACTIONS',
  durationMs: 'RELIABILITY_DURATION_MS',
  jobs: 'RELIABILITY_JOBS',
  backlog: 'RELIABILITY_BACKLOG',
  drainTimeoutMs: 'RELIABILITY_DRAIN_TIMEOUT_MS',
  accounts: 'RELIABILITY_ACCOUNTS',
  paymentKeys: 'RELIABILITY_PAYMENT_KEYS',
  singleRunKeys: 'RELIABILITY_SINGLE_RUN_KEYS',
  restarts: 'RELIABILITY_RESTARTS',
  restartEveryMs: 'RELIABILITY_RESTART_EVERY_MS',
  faultMinMs: 'RELIABILITY_FAULT_MIN_MS',
  faultMaxMs: 'RELIABILITY_FAULT_MAX_MS',
  sampleEveryMs: 'RELIABILITY_SAMPLE_EVERY_MS',
  seed: 'RELIABILITY_SEED',
  history: 'RELIABILITY_HISTORY',
};

/** Options from `RELIABILITY_*` environment variables over `base` (numbers only). */
export function optionsFromEnv(base = {}, env = process.env) {
  const options = { ...base };
  for (const [name, variable] of Object.entries(ENV_NAMES)) {
    const raw = env[variable];
    if (raw === undefined || raw === '') continue;
    const value = Number(raw.replaceAll('_', ''));
    if (!Number.isFinite(value) || value < 0) throw new Error(`${variable}=${raw}: expected a number ≥ 0`);
    options[name] = value;
  }
  return options;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const add = (into, from) => {
  for (const [k, v] of Object.entries(from ?? {})) into[k] = (into[k] ?? 0) + v;
};
const inc = (into, k, n = 1) => {
  into[k] = (into[k] ?? 0) + n;
};

/**
 * Runs one mixed workload against `postgres` (a `startPostgres()` result: its `restart()` is used, so
 * give the run a server of its own) and returns the figures and the anomalies found.
 *
 * @param {{ postgres: { url: string, restart(): Promise<void> }, log?: (line: string) => void } & Partial<typeof DEFAULTS>} input
 */
export async function runMixedWorkload(input) {
  const { postgres, log = () => {}, ...rest } = input;
  const o = { ...DEFAULTS, ...rest };
  if (!o.seed) o.seed = 1 + (Date.now() % 1_000_000);
  const rnd = seededRandom(o.seed);
  const anomalies = [];
  const S = `rel_${o.seed}`;

  // One database per run, on the run's own server.
  const admin = new pg.Client({ connectionString: postgres.url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${S}`);
  await admin.end();
  const dbUrlObject = new URL(postgres.url);
  dbUrlObject.pathname = `/${S}`;
  const dbUrl = dbUrlObject.toString();
  const pool = new pg.Pool({ connectionString: dbUrl, max: 4, application_name: 'reliability-harness' });
  const tm = new TxManager(pool, { defaults: { maxAttempts: 20, backoff: { baseMs: 50, capMs: 1000 } } });

  // Schema: effect tables have no unique constraint, so a duplicated effect is visible to the checks.
  await pool.query(`CREATE SCHEMA ${S}`);
  // ver: a value of its own written by each update of the row (the history's register of the account)
  await pool.query(`CREATE TABLE ${S}.accounts (id int PRIMARY KEY, balance bigint NOT NULL, ver text)`);
  await pool.query(`INSERT INTO ${S}.accounts SELECT g, $1 FROM generate_series(1, $2) g`, [
    INITIAL_BALANCE,
    o.accounts,
  ]);
  await pool.query(
    `CREATE TABLE ${S}.transfers (id bigserial PRIMARY KEY, src int NOT NULL, dst int NOT NULL,
       amount int NOT NULL, mode text NOT NULL)`,
  );
  await pool.query(
    `CREATE TABLE ${S}.bookings (id bigserial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL, worker int)`,
  );
  await pool.query(
    `CREATE TABLE ${S}.payments (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL, token text)`,
  );
  await pool.query(
    `CREATE TABLE ${S}.report_effects (id bigserial PRIMARY KEY, key text NOT NULL, slot int NOT NULL, token text)`,
  );
  await pool.query(`CREATE TABLE ${S}.job_effects (n int NOT NULL, attempt int NOT NULL)`);
  await pool.query(`CREATE TABLE ${S}.audit_effects (transfer_id bigint NOT NULL)`);
  await pool.query(`CREATE TABLE ${S}.enqueued_chunks (first int PRIMARY KEY, count int NOT NULL)`);
  (
    await new Bookings({ table: `${S}.bookings`, resource: 'room', during: 'during' }).migrate(pool)
  )._unsafeUnwrap();
  (await new IdempotencyKeys(tm, { table: `${S}.idem_keys` }).migrate())._unsafeUnwrap();
  (await migrateSingleRun(pool, { table: `${S}.single_runs` }))._unsafeUnwrap();
  const queue = new Queue({
    pool,
    txManager: tm,
    schema: `${S}_q`,
    archive: true,
    tasks: {
      job: z.object({ n: z.number().int(), fail: z.boolean() }),
      audit: z.object({ transferId: z.string() }),
    },
  });
  (await queue.migrate())._unsafeUnwrap();

  const proxy = await FaultProxy.start({ target: dbUrl });
  const historyDir = o.history ? mkdtempSync(join(tmpdir(), 'pg-txkit-history-')) : undefined;

  // ---- workers -------------------------------------------------------------------------------------
  const totals = { ops: {}, retries: {}, jobOutcomes: {}, unhandled: 0, defects: [] };
  const successes = { payment: {}, singleRun: {} }; // key → reported (non-replayed) successes
  /** Latest cumulative report of each live process (by pid); folded into totals when it exits. */
  const latest = new Map();
  const finals = new Map();
  const children = new Map(); // slot → child
  const faults = {};
  const rssSamples = [];
  const unexpectedExits = [];
  let phase = 'run'; // 'run' → 'drain' → 'stop'
  /** Sends `message` now, or as soon as the child has loaded and listens. */
  const tell = (child, message) => {
    if (child.ready) child.send(message);
    else child.pending = message;
  };
  const fold = (pid) => {
    const report = latest.get(pid);
    if (!report) return;
    latest.delete(pid);
    for (const [kind, outcomes] of Object.entries(report.ops)) {
      totals.ops[kind] ??= {};
      add(totals.ops[kind], outcomes);
    }
    add(totals.retries, report.retries);
    add(totals.jobOutcomes, report.jobOutcomes);
    totals.defects.push(...report.defects);
  };
  const liveOps = () => {
    let n = 0;
    for (const k of Object.values(totals.ops)) for (const v of Object.values(k)) n += v;
    for (const r of latest.values()) n += r.opsTotal;
    return n;
  };
  const spawn = (slot) => {
    const config = {
      url: proxy.url,
      schema: S,
      slot,
      seed: o.seed,
      poolMax: o.poolMax,
      lanes: o.lanes,
      queueConcurrency: o.queueConcurrency,
      accounts: o.accounts,
      rooms: o.rooms,
      bookingHours: o.bookingHours,
      paymentKeys: o.paymentKeys,
      singleRunKeys: o.singleRunKeys,
      reportEveryMs: o.reportEveryMs,
      startDrained: phase !== 'run',
      historyDir,
      naive: o.naive,
    };
    const child = fork(WORKER_SCRIPT, [], {
      env: { ...process.env, RELIABILITY_CONFIG: JSON.stringify(config) },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr?.on('data', (d) => {
      if (stderr.length < 4000) stderr += d;
    });
    children.set(slot, child);
    if (phase === 'drain') child.pending = 'drain'; // a respawn during the drain only works the queue
    child.on('message', (m) => {
      if (m.type === 'report' || m.type === 'final') {
        latest.set(m.pid, m);
        for (const key of m.successes.payment) inc(successes.payment, key);
        for (const key of m.successes.singleRun) inc(successes.singleRun, key);
        if (m.type === 'final') finals.set(slot, m);
      } else if (m.type === 'unhandled') {
        totals.unhandled++;
        anomalies.push(
          `unhandled rejection/exception in worker ${slot} (pid ${m.pid}): ${m.reason.slice(0, 3000)}`,
        );
      } else if (m.type === 'drained') {
        child.drained = true;
      } else if (m.type === 'ready') {
        // Messages sent before the child listens would be lost: deliver the phase's message now.
        child.ready = true;
        if (child.pending) child.send(child.pending);
      }
    });
    child.on('exit', (code, signal) => {
      fold(child.pid);
      if (children.get(slot) === child) children.delete(slot);
      if (child.killedByHarness) {
        // A SIGKILL whose exit arrives after the run ended (during the drain) still needs its slot back:
        // the respawn only works the queue, and sends the slot's final report at 'stop'.
        if (phase !== 'stop') spawn(slot);
        return;
      }
      if (phase !== 'stop' || code !== 0) {
        unexpectedExits.push(
          `worker ${slot} (pid ${child.pid}) exited: code ${code}, signal ${signal}; ${stderr}`,
        );
        if (phase !== 'stop') spawn(slot);
      }
    });
    return child;
  };

  const pendingJobs = async () => {
    const r = await pool.query(
      `SELECT count(*)::int AS n FROM ${S}_q.jobs WHERE state IN ('pending', 'running')`,
    );
    return r.rows[0].n;
  };

  // ---- enqueueing: chunks recorded in the same transaction, so an ambiguous failure is never repeated --
  let enqueued = 0;
  const CHUNK = Math.min(2000, Math.max(100, Math.ceil(o.jobs / 20)));
  const topUp = async () => {
    if (enqueued >= o.jobs) return;
    // Keep the backlog bounded (a soak enqueues a million jobs over its whole run, not at once).
    if (enqueued > 0 && (await pendingJobs()) > o.backlog) return;
    const r = await tm.do(async (tx) => {
      const last = await tx.query(
        // No lock needed: only this loop enqueues, one top-up at a time. A top-up whose outcome is unknown
        // (connection lost at COMMIT) is never repeated blindly: the next one starts after what committed.
        `SELECT coalesce(max(first + count), 0)::int AS next FROM ${S}.enqueued_chunks`,
      );
      const first = last.rows[0].next;
      const count = Math.min(CHUNK, o.jobs - first);
      if (count <= 0) return first;
      const payloads = Array.from({ length: count }, (_, i) => ({
        n: first + i,
        fail: (first + i) % FAIL_EVERY === 0,
      }));
      const good = payloads.filter((p) => !p.fail);
      const bad = payloads.filter((p) => p.fail);
      const backoff = { baseMs: 10, capMs: 200 };
      const a = await queue.enqueueMany(tx, 'job', good, { maxAttempts: 1000, backoff });
      if (a.isErr()) throw a.error;
      if (bad.length) {
        const b = await queue.enqueueMany(tx, 'job', bad, { maxAttempts: 2, backoff });
        if (b.isErr()) throw b.error;
      }
      await tx.query(`INSERT INTO ${S}.enqueued_chunks (first, count) VALUES ($1, $2)`, [first, count]);
      return first + count;
    });
    if (r.isOk()) enqueued = r.value;
  };

  // ---- faults ---------------------------------------------------------------------------------------
  let restarts = 0;
  let lastRestart = 0;
  const started = Date.now();
  const firstRound = FAULT_KINDS.filter((k) => k !== 'restart' || o.restarts > 0).sort(() => rnd() - 0.5);
  const chooseFault = () => {
    const next = firstRound.shift();
    if (next) return next;
    const x = rnd();
    if (x < 0.3) return 'terminate';
    if (x < 0.5) return 'dropAll';
    if (x < 0.65) return 'stall';
    if (x < 0.8) return 'sigkill';
    if (x < 0.85 && restarts < o.restarts && Date.now() - lastRestart >= o.restartEveryMs) return 'restart';
    return 'none';
  };
  const inject = async (kind) => {
    switch (kind) {
      case 'terminate': {
        // Any backend of the workers (not the harness's own monitoring connections).
        const r = await pool.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'reliability-worker'
            ORDER BY random() LIMIT $1`,
          [1 + Math.floor(rnd() * 3)],
        );
        inc(faults, 'terminate', r.rowCount ?? 0);
        return;
      }
      case 'dropAll':
        proxy.dropAll();
        inc(faults, 'dropAll');
        return;
      case 'stall':
        proxy.stall();
        inc(faults, 'stall');
        await sleep(100 + rnd() * (o.stallMaxMs - 100));
        proxy.resume();
        return;
      case 'sigkill': {
        const slots = [...children.keys()].filter((s) => !(o.spareSlot0 && s === 0));
        const victim = children.get(slots[Math.floor(rnd() * slots.length)]);
        if (victim) {
          victim.killedByHarness = true;
          if (victim.kill('SIGKILL')) inc(faults, 'sigkill');
        }
        return;
      }
      case 'restart':
        restarts++;
        lastRestart = Date.now();
        await postgres.restart();
        inc(faults, 'restart');
        return;
      default:
    }
  };

  // Whatever fails below (a harness bug, a lost server), no worker process may outlive the run.
  const abort = async () => {
    phase = 'stop';
    for (const child of children.values()) {
      child.killedByHarness = true;
      child.kill('SIGKILL');
    }
    await proxy.close().catch(() => {});
    await pool.end().catch(() => {});
    if (historyDir) rmSync(historyDir, { recursive: true, force: true });
  };
  let workloadMs = 0;
  let totalMs = 0;
  let jobsRow;
  let history;
  try {
    for (let slot = 0; slot < o.workers; slot++) spawn(slot);
    let nextSample = started;
    let progressAt = started + 10_000;
    const sample = () => {
      const t = Date.now() - started;
      rssSamples.push({ t, slot: 'harness', pid: process.pid, rss: process.memoryUsage().rss });
      for (const r of latest.values())
        rssSamples.push({ t, slot: r.slot, pid: r.pid, rss: r.rss, heapUsed: r.heapUsed });
    };
    while ((liveOps() < o.transactions || enqueued < o.jobs) && Date.now() - started < o.durationMs) {
      await sleep(o.faultMinMs + rnd() * (o.faultMaxMs - o.faultMinMs));
      try {
        await inject(chooseFault());
        await topUp();
      } catch {
        // the harness's own connection was hit by the fault (restart): the next tick goes on
      }
      if (Date.now() >= nextSample) {
        sample();
        nextSample += o.sampleEveryMs;
      }
      if (Date.now() >= progressAt) {
        progressAt += 10_000;
        log(
          `  … ${Math.round((Date.now() - started) / 1000)} s, ${liveOps()} operations, ${enqueued} jobs enqueued, faults ${JSON.stringify(faults)}`,
        );
      }
    }
    workloadMs = Date.now() - started;

    // ---- drain: finish the operations, enqueue the rest, let the queue empty -------------------------
    phase = 'drain';
    log(`  … workload done after ${Math.round(workloadMs / 1000)} s; draining the queue`);
    for (const child of children.values()) tell(child, 'drain');
    const drainStarted = Date.now();
    let left = -1;
    while (Date.now() - drainStarted < o.drainTimeoutMs) {
      try {
        await topUp();
        left =
          enqueued >= o.jobs && [...children.values()].every((c) => c.drained) ? await pendingJobs() : -1;
        if (left === 0) break;
      } catch {
        left = -1;
      }
      if (Date.now() >= nextSample) {
        sample();
        nextSample += o.sampleEveryMs;
      }
      await sleep(250);
    }
    if (left !== 0) anomalies.push(`queue not drained after ${o.drainTimeoutMs} ms: ${left} pending/running`);

    // ---- leak checks while the workers are still connected (and idle) ---------------------------------
    await sleep(1500);
    const report = await lockReport(pool, { idleInTransactionMs: 1000 });
    if (report.isErr()) anomalies.push(`lockReport failed: ${report.error.message}`);
    else {
      for (const s of report.value.idleInTransaction) {
        anomalies.push(`session idle in transaction: ${JSON.stringify(s).slice(0, 300)}`);
      }
    }
    const advisory = async () => {
      const r = await listAdvisoryLocks(pool);
      if (r.isErr()) throw r.error;
      return new Set(r.value.filter((l) => l.granted).map((l) => `${l.pid}:${String(l.key)}`));
    };
    const a1 = await advisory();
    await sleep(500);
    const a2 = await advisory();
    for (const held of a1) if (a2.has(held)) anomalies.push(`advisory lock still held: ${held}`);

    // ---- stop the workers; each reports its pool (no client checked out) ------------------------------
    phase = 'stop';
    sample();
    const exits = [...children.values()].map(
      (child) =>
        new Promise((resolve) => {
          if (child.exitCode !== null) return resolve();
          const timer = setTimeout(() => {
            anomalies.push(`worker pid ${child.pid} did not exit within 30 s of 'stop'`);
            child.kill('SIGKILL');
          }, 30_000);
          child.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
          tell(child, 'stop');
        }),
    );
    await Promise.all(exits);
    for (const [slot, final] of finals) {
      const { total, idle, waiting } = final.poolStats;
      if (total - idle !== 0 || waiting !== 0) {
        anomalies.push(`worker ${slot}: ${total - idle} client(s) checked out, ${waiting} waiting at exit`);
      }
    }
    if (finals.size !== o.workers)
      anomalies.push(`only ${finals.size} of ${o.workers} workers sent a final report`);
    anomalies.push(...unexpectedExits.map((e) => `unexpected exit: ${e.slice(0, 500)}`));
    for (const d of totals.defects) anomalies.push(`defect (tm.do rejected): ${d.slice(0, 500)}`);
    totalMs = Date.now() - started;

    log(`  … workers stopped after ${Math.round(totalMs / 1000)} s; checking the data`);
    // ---- data checks ---------------------------------------------------------------------------------
    const one = async (sql, params = []) => (await pool.query(sql, params)).rows[0];
    const check = async (what, sql, params) => {
      const row = await one(sql, params);
      if (row.n !== 0) anomalies.push(`${what}: ${row.n}`);
    };
    const money =
      await one(`SELECT sum(balance)::bigint AS sum, count(*) FILTER (WHERE balance < 0)::int AS negative
                             FROM ${S}.accounts`);
    if (Number(money.sum) !== o.accounts * INITIAL_BALANCE) {
      anomalies.push(`total balance ${money.sum}, expected ${o.accounts * INITIAL_BALANCE}`);
    }
    if (money.negative !== 0) anomalies.push(`accounts with a negative balance: ${money.negative}`);
    // Set-based checks only (GROUP BY + hash joins): a soak has hundreds of thousands of rows.
    await check(
      'accounts whose balance differs from the transfer log',
      `WITH moves AS (SELECT src AS id, -amount AS delta FROM ${S}.transfers
                    UNION ALL SELECT dst, amount FROM ${S}.transfers),
          net AS (SELECT id, sum(delta) AS delta FROM moves GROUP BY id)
     SELECT count(*)::int AS n FROM ${S}.accounts a LEFT JOIN net ON net.id = a.id
      WHERE a.balance <> $1 + coalesce(net.delta, 0)`,
      [INITIAL_BALANCE],
    );
    await check(
      'overlapping bookings',
      `SELECT count(*)::int AS n FROM ${S}.bookings a JOIN ${S}.bookings b
        ON a.room = b.room AND a.id < b.id AND a.during && b.during`,
    );
    await check(
      'payment keys with more than one effect',
      `SELECT count(*)::int AS n FROM (SELECT key FROM ${S}.payments GROUP BY key HAVING count(*) > 1) d`,
    );
    await check(
      'payment effects without a done key / done keys without exactly one effect',
      `SELECT count(*)::int AS n FROM ${S}.idem_keys k FULL JOIN
        (SELECT key, count(*) AS c FROM ${S}.payments GROUP BY key) p ON p.key = k.key
      WHERE k.key IS NULL OR p.key IS NULL OR k.status <> 'done' OR p.c <> 1`,
    );
    await check(
      'singleRun keys with more than one effect, or an effect without its record (or the reverse)',
      `SELECT count(*)::int AS n FROM ${S}.single_runs r FULL JOIN
        (SELECT key, count(*) AS c FROM ${S}.report_effects GROUP BY key) e ON e.key = r.key
      WHERE r.key IS NULL OR e.key IS NULL OR e.c <> 1 OR r.name <> 'report'`,
    );
    for (const [kind, map] of Object.entries(successes)) {
      let twice = 0;
      for (const c of Object.values(map)) if (c > 1) twice++;
      if (twice) anomalies.push(`${kind}: ${twice} key(s) reported successful (not replayed) more than once`);
    }
    // Jobs: each enqueued n is done exactly once (archived, one effect) or, if planned to fail, dead once.
    await check(
      'enqueued jobs not ending as planned (done once + one effect, or dead once + no effect)',
      `WITH expected AS (
        SELECT g AS n, g % ${FAIL_EVERY} = 0 AS fail
          FROM ${S}.enqueued_chunks c, generate_series(c.first, c.first + c.count - 1) g),
      done AS (SELECT (payload->>'n')::int AS n, count(*) AS c FROM ${S}_q.jobs_archive
                WHERE task = 'job' AND state = 'done' GROUP BY 1),
      dead AS (SELECT (payload->>'n')::int AS n, count(*) AS c FROM ${S}_q.jobs
                WHERE task = 'job' AND state = 'dead' GROUP BY 1),
      eff AS (SELECT n, count(*) AS c FROM ${S}.job_effects GROUP BY 1)
      SELECT count(*)::int AS n FROM expected x
        LEFT JOIN done ON done.n = x.n LEFT JOIN dead ON dead.n = x.n LEFT JOIN eff ON eff.n = x.n
       WHERE CASE WHEN x.fail THEN coalesce(dead.c, 0) <> 1 OR done.c IS NOT NULL OR eff.c IS NOT NULL
                  ELSE coalesce(done.c, 0) <> 1 OR coalesce(eff.c, 0) <> 1 OR dead.c IS NOT NULL END`,
    );
    await check(
      'job rows or effects for job numbers never enqueued',
      `WITH expected AS MATERIALIZED (SELECT g AS n FROM ${S}.enqueued_chunks c,
                                     generate_series(c.first, c.first + c.count - 1) g)
      SELECT ((SELECT count(*) FROM ${S}.job_effects e LEFT JOIN expected x ON x.n = e.n WHERE x.n IS NULL)
            + (SELECT count(*) FROM (SELECT (payload->>'n')::int AS n FROM ${S}_q.jobs WHERE task = 'job'
                 UNION ALL SELECT (payload->>'n')::int FROM ${S}_q.jobs_archive WHERE task = 'job') j
                LEFT JOIN expected x ON x.n = j.n WHERE x.n IS NULL))::int AS n`,
    );
    await check(
      'committed transfers whose audit job is not done exactly once with exactly one effect (outbox)',
      `WITH done AS (SELECT (payload->>'transferId')::bigint AS id, count(*) AS c FROM ${S}_q.jobs_archive
                    WHERE task = 'audit' AND state = 'done' GROUP BY 1),
          eff AS (SELECT transfer_id AS id, count(*) AS c FROM ${S}.audit_effects GROUP BY 1)
     SELECT count(*)::int AS n FROM ${S}.transfers t LEFT JOIN done ON done.id = t.id LEFT JOIN eff ON eff.id = t.id
      WHERE coalesce(done.c, 0) <> 1 OR coalesce(eff.c, 0) <> 1`,
    );
    await check(
      'audit jobs or effects without a committed transfer',
      `SELECT ((SELECT count(*) FROM ${S}.audit_effects e LEFT JOIN ${S}.transfers t ON t.id = e.transfer_id
               WHERE t.id IS NULL)
           + (SELECT count(*) FROM (SELECT payload FROM ${S}_q.jobs WHERE task = 'audit'
                 UNION ALL SELECT payload FROM ${S}_q.jobs_archive WHERE task = 'audit') j
                LEFT JOIN ${S}.transfers t ON t.id = (j.payload->>'transferId')::bigint
              WHERE t.id IS NULL))::int AS n`,
    );
    jobsRow = await one(
      `SELECT (SELECT count(*) FROM ${S}_q.jobs_archive)::int AS done, (SELECT count(*) FROM ${S}_q.jobs WHERE state = 'dead')::int AS dead,
            (SELECT count(*) FROM ${S}.transfers)::int AS transfers`,
    );
    // ---- the history: read the workers' journals, check it at what the patterns promise ----------------
    if (historyDir) {
      const checkStarted = Date.now();
      const recorded = readHistory(historyDir);
      rmSync(historyDir, { recursive: true, force: true });
      const check = checkHistory(recorded, { model: 'serializable', processOrder: true });
      const outcomes = { commit: 0, abort: 0, unknown: 0 };
      for (const t of recorded.transactions) outcomes[t.outcome]++;
      history = {
        transactions: recorded.transactions.length,
        outcomes,
        valid: check.valid,
        anomalyTypes: check.anomalyTypes,
        forbidden: check.forbidden,
        dependencies: check.dependencies,
        checkMs: Date.now() - checkStarted,
        explanations: check.anomalies.slice(0, 3).map((a) => a.explanation),
      };
      if (!check.valid) {
        anomalies.push(
          `history not serializable: ${check.forbidden.join(', ')}; ${history.explanations.join(' | ').slice(0, 1500)}`,
        );
      }
    }
  } catch (error) {
    await abort();
    throw error;
  }
  await proxy.close();
  await pool.end();
  const cleanup = new pg.Client({ connectionString: postgres.url });
  await cleanup.connect();
  await cleanup.query(`DROP DATABASE IF EXISTS ${S} WITH (FORCE)`);
  await cleanup.end();

  // ---- summary --------------------------------------------------------------------------------------
  const opsByKind = {};
  const outcomes = {};
  for (const [kind, byOutcome] of Object.entries(totals.ops)) {
    opsByKind[kind] = Object.values(byOutcome).reduce((s, v) => s + v, 0);
    add(outcomes, byOutcome);
  }
  const operations = Object.values(opsByKind).reduce((s, v) => s + v, 0);
  if (outcomes.StatementTimeout) faults.statementTimeout = outcomes.StatementTimeout;
  const result = {
    seed: o.seed,
    options: o,
    workloadMs,
    totalMs,
    operations,
    opsByKind,
    outcomes,
    jobs: { enqueued, done: jobsRow.done, dead: jobsRow.dead, outcomes: totals.jobOutcomes },
    transfersCommitted: jobsRow.transfers,
    faults,
    retries: totals.retries,
    unhandled: totals.unhandled,
    history,
    rssSamples,
    anomalies,
  };
  const fmt = (obj) =>
    Object.entries(obj)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
  result.summary =
    `reliability seed=${o.seed} workers=${o.workers} ${Math.round(totalMs / 1000)}s: ` +
    `operations ${operations} (${fmt(opsByKind)}); jobs ${jobsRow.done} done + ${jobsRow.dead} dead; ` +
    `faults (${fmt(faults)}); retries by code (${fmt(totals.retries)}); ` +
    (history
      ? `history ${history.transactions} transactions (${fmt(history.outcomes)}), ${history.dependencies} dependencies, ` +
        `${history.valid ? 'serializable' : `NOT serializable: ${history.forbidden.join(', ')}`} (checked in ${history.checkMs} ms); `
      : '') +
    `anomalies found = ${anomalies.length}`;
  return result;
}
