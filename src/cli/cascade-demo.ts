import pg from 'pg';
import { type LockReport, lockReport } from '../diagnostics/lock-report.js';
import { type DdlAttempt, safeDdl } from '../diagnostics/safe-ddl.js';
import type { Scenario, ScenarioContext, ScenarioResult, SideResult } from './scenario.js';

/** What the cascade staging saw, besides the scenario result. */
export interface CascadeObservation {
  /** doctor's report taken while the naive ALTER TABLE had the readers queued behind it. */
  readonly report: LockReport;
  /** pid of the waiting ALTER TABLE (the root cause) and of the long transaction (what it waits for). */
  readonly alterPid: number;
  readonly holderPid: number;
  /** safeDdl's attempts on the pattern side. */
  readonly attempts: readonly DdlAttempt[];
}

const DDL = 'ALTER TABLE orders ADD COLUMN delivery_notes text';

/**
 * The lock-queue cascade behind a waiting ALTER TABLE, staged live: a long transaction reads `orders` (ACCESS SHARE), an
 * `ALTER TABLE orders ADD COLUMN` queues for ACCESS EXCLUSIVE behind it, and readers queue behind the
 * ALTER. Naive side: a plain ALTER — every reader stays stuck as long as the long transaction lasts.
 * Pattern side: {@link safeDdl} with a short lock_timeout — it gives up, the readers go through, and it
 * succeeds after the long transaction ends. An anomaly is a reader still stuck while the long
 * transaction is open (watched for `window` ms on the naive side; on the pattern side readers get up
 * to 10 s, far more than the lock_timeout they actually need).
 *
 * @example
 * const scenario = createCascadeScenario((o) => console.log(o.report.cascades[0]?.rootCause.pid));
 */
export function createCascadeScenario(onObservation?: (o: CascadeObservation) => void): Scenario {
  return {
    id: 'lock-queue-cascade',
    title: 'ALTER TABLE behind a long transaction',
    pattern: 'safeDdl',
    run: (context) => runCascade(context, onObservation),
  };
}

async function runCascade(
  context: ScenarioContext,
  onObservation: ((o: CascadeObservation) => void) | undefined,
): Promise<ScenarioResult> {
  const readers = Math.max(2, context.clients);
  const windowMs = Math.round(Math.min(2000, Math.max(400, 2000 * context.scale)));
  const lockTimeout = Math.max(50, Math.round(windowMs / 4));
  const pool = new pg.Pool({
    connectionString: context.url,
    max: 4,
    application_name: 'demo:cascade-monitor',
  });
  pool.on('error', () => {});
  const ddlPool = new pg.Pool({ connectionString: context.url, max: 1, application_name: 'demo:safe-ddl' });
  ddlPool.on('error', () => {});
  const clients: pg.Client[] = [];
  const open = async (name: string) => {
    const c = new pg.Client({ connectionString: context.url, application_name: `demo:${name}` });
    c.on('error', () => {});
    clients.push(c);
    await c.connect();
    return c;
  };
  const total = 2 * (readers + 3);
  let done = 0;
  const step = (n = 1) => {
    done += n;
    context.onProgress(Math.min(done, total), total);
  };
  const abort = () => {
    for (const c of clients) void c.end().catch(() => {});
  };
  context.signal.addEventListener('abort', abort, { once: true });
  try {
    // Setup: no concurrency yet. CREATE TABLE takes no lock others wait for.
    await pool.query('CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL)');
    // ROW EXCLUSIVE on orders, alone.
    await pool.query('INSERT INTO orders SELECT g, g FROM generate_series(1, $1::int) g', [
      Math.max(100, Math.round(10_000 * context.scale)),
    ]);
    const holder = await open('long-transaction');
    const alter = await open('migration');
    const readerClients = await Promise.all(
      Array.from({ length: readers }, (_, i) => open(`reader-${i + 1}`)),
    );
    // pg_backend_pid(): no lock.
    const pidOf = async (c: pg.Client) =>
      (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number;
    const holderPid = await pidOf(holder);
    const alterPid = await pidOf(alter);
    const readerPids = await Promise.all(readerClients.map(pidOf));
    step();

    // ---- naive: a plain ALTER TABLE ----
    let started = performance.now();
    // ACCESS SHARE on orders until COMMIT: the "long transaction" (a report, a forgotten BEGIN …).
    await holder.query('BEGIN');
    await holder.query('SELECT count(*) FROM orders');
    // Waits for ACCESS EXCLUSIVE behind the holder, forever (no lock_timeout).
    const naiveAlter = alter.query(DDL).then(
      () => 'ok',
      () => 'failed',
    );
    await until(pool, 'SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted', [alterPid], context.signal);
    step();
    const naiveReads = startReaders(readerClients);
    await untilBlockedOrDone(pool, readerPids, naiveReads, context.signal);
    step(readers);
    await delay(windowMs, context.signal);
    // What `pg-txkit doctor` shows now, with the readers stuck for the whole window.
    const reportResult = await lockReport(pool, { idleInTransactionMs: 0, longWaitMs: windowMs });
    if (reportResult.isErr()) throw reportResult.error;
    const naiveThrough = naiveReads.filter((r) => r.finished).length;
    // The long transaction ends: the ALTER runs, then the readers.
    await holder.query('COMMIT');
    await naiveAlter;
    await Promise.all(naiveReads.map((r) => r.promise));
    const naiveMs = performance.now() - started;
    step();
    const naive: SideResult = {
      operations: readers,
      anomalies: readers - naiveThrough,
      opsPerSec: readers / (naiveMs / 1000),
    };
    // Reset for the pattern side (ACCESS EXCLUSIVE, nobody else holds a lock now).
    await pool.query('ALTER TABLE orders DROP COLUMN delivery_notes');

    // ---- pattern: safeDdl (short lock_timeout, retries) ----
    started = performance.now();
    await holder.query('BEGIN');
    await holder.query('SELECT count(*) FROM orders');
    let patternThrough = 0;
    const attempts: DdlAttempt[] = [];
    const patternReads: Reader[] = [];
    const ddl = safeDdl(ddlPool, DDL, {
      lockTimeout,
      attempts: 50,
      backoff: { baseMs: 20, capMs: 200 },
      signal: context.signal,
      onAttempt: (a) => {
        attempts.push(a);
      },
    });
    await until(
      pool,
      "SELECT 1 FROM pg_locks WHERE relation = 'orders'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted",
      [],
      context.signal,
    );
    step();
    patternReads.push(...startReaders(readerClients));
    await untilBlockedOrDone(pool, readerPids, patternReads, context.signal);
    step(readers);
    // The readers get through while the long transaction is still open (bounded at 10 s).
    const bound = new AbortController();
    await Promise.race([
      Promise.all(patternReads.map((r) => r.promise)),
      delay(10_000, bound.signal).catch(() => {}),
    ]);
    bound.abort();
    patternThrough = patternReads.filter((r) => r.finished).length;
    // Releases the ACCESS SHARE: safeDdl's next attempt gets its lock.
    await holder.query('COMMIT');
    const result = await ddl;
    if (result.isErr()) throw result.error;
    await Promise.all(patternReads.map((r) => r.promise));
    const patternMs = performance.now() - started;
    step();
    const pattern: SideResult = {
      operations: readers,
      anomalies: readers - patternThrough,
      opsPerSec: readers / (patternMs / 1000),
    };
    onObservation?.({ report: reportResult.value, alterPid, holderPid, attempts });
    const gaveUp = attempts.filter((a) => a.outcome !== 'ok').length;
    return {
      naive,
      pattern,
      anomalyLabel: 'readers stuck behind the ALTER',
      unit: 'readers/s',
      note:
        `naive: ${readers} reader(s) queued behind the waiting ALTER (pid ${alterPid}) for the whole ${windowMs} ms watched; ` +
        `safeDdl gave up ${gaveUp}× (lock_timeout ${lockTimeout} ms), let them through, and succeeded on attempt ${attempts.length}`,
    };
  } finally {
    context.signal.removeEventListener('abort', abort);
    await Promise.all(clients.map((c) => c.end().catch(() => {})));
    await pool.end().catch(() => {});
    await ddlPool.end().catch(() => {});
  }
}

interface Reader {
  readonly promise: Promise<void>;
  finished: boolean;
}

/** Every reader runs one SELECT (ACCESS SHARE on orders); `finished` flips when it returns. */
function startReaders(clients: readonly pg.Client[]): Reader[] {
  return clients.map((c) => {
    const reader: Reader = {
      finished: false,
      // ACCESS SHARE on orders: queues behind a waiting ACCESS EXCLUSIVE request.
      promise: c.query('SELECT count(*) FROM orders').then(
        () => {
          reader.finished = true;
        },
        () => {
          reader.finished = true;
        },
      ),
    };
    return reader;
  });
}

/** Polls a monitor query over pg_locks (no heavyweight lock; bounded: 15 s) until it returns a row. */
async function until(pool: pg.Pool, sql: string, params: unknown[], signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    signal.throwIfAborted();
    if (((await pool.query(sql, params)).rowCount ?? 0) > 0) return;
    await delay(5, signal);
  }
}

/** Polls until each reader is either finished or waiting on a lock (bounded: 15 s). */
async function untilBlockedOrDone(
  pool: pg.Pool,
  pids: readonly number[],
  readers: readonly Reader[],
  signal: AbortSignal,
): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    signal.throwIfAborted();
    const pending = pids.filter((_, i) => !readers[i]?.finished);
    if (pending.length === 0) return;
    // pg_blocking_pids: the lock manager's view; no heavyweight lock.
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM unnest($1::int[]) AS pid WHERE cardinality(pg_blocking_pids(pid)) > 0',
      [pending],
    );
    if (rows[0]?.n === pending.length) return;
    await delay(5, signal);
  }
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
