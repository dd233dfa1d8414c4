import pg from 'pg';
import { advisoryKey } from '../../advisory/advisory-key.js';
import { findLeakedAdvisoryLocks } from '../../advisory/find-leaked-advisory-locks.js';
import { migrateSingleRun, singleRun } from '../../advisory/single-run.js';
import { TxManager } from '../../tx/tx-manager.js';
import type { Scenario, ScenarioContext, ScenarioResult, SideResult } from '../scenario.js';

/** Concurrent "paths" per replica that run the job on the replica's one pool (a cron tick and two HTTP retries). */
const PATHS_PER_REPLICA = 3;
/** Attempts per path and day when the job is busy elsewhere (then the path gives up until the next tick). */
const ATTEMPTS = 20;

function side(operations: number, anomalies: number, startedAt: number): SideResult {
  const seconds = Math.max(0.001, (performance.now() - startedAt) / 1000);
  return { operations, anomalies, opsPerSec: Math.round(operations / seconds) };
}

function pools(url: string, replicas: number, name: string): pg.Pool[] {
  return Array.from({ length: replicas }, (_, i) => {
    const pool = new pg.Pool({ connectionString: url, max: 2, application_name: `${name}-replica-${i}` });
    pool.on('error', () => {});
    return pool;
  });
}

/** Duplicated posts + days without a post, from the checker query. */
async function postAnomalies(
  pool: pg.Pool,
  table: 'naive_posts' | 'pattern_posts',
  days: number,
): Promise<number> {
  // No lock: plain reads after the workload finished.
  const { rows } = await pool.query<{ duplicates: number; missing: number }>(
    `SELECT coalesce(sum(n - 1), 0)::int AS duplicates,
            ($1::int - count(*))::int AS missing
       FROM (SELECT day, count(*) AS n FROM ${table} GROUP BY day) per_day`,
    [days],
  );
  return (rows[0]?.duplicates ?? 0) + (rows[0]?.missing ?? 0);
}

/**
 * 'daily-post': N replicas run the daily job from 3 concurrent paths each, day after day.
 * Naive: a SESSION advisory lock through `pool.query` (lock and unlock may land on different pooled
 * clients), then check-then-insert. Pattern: `singleRun` (transaction-scoped try-lock + a run record
 * with a primary key, in the job's transaction). Anomalies: duplicated or missing posts, plus advisory
 * locks left held by idle pooled connections (leaks) when the run ends.
 */
async function runDailyPost(context: ScenarioContext): Promise<ScenarioResult> {
  const days = Math.max(3, Math.round(30 * context.scale));
  const replicas = Math.max(2, context.clients);
  const admin = new pg.Pool({ connectionString: context.url, max: 2 });
  admin.on('error', () => {});
  const total = 2 * days;
  let progress = 0;
  try {
    await admin.query(`CREATE TABLE naive_posts (day int NOT NULL, replica int NOT NULL);
                       CREATE TABLE pattern_posts (day int NOT NULL, replica int NOT NULL)`);
    (await migrateSingleRun(admin))._unsafeUnwrap();

    // Naive side.
    let operations = 0;
    let t0 = performance.now();
    const naivePools = pools(context.url, replicas, 'naive');
    let leaked = 0;
    try {
      for (let day = 1; day <= days && !context.signal.aborted; day++) {
        const key = advisoryKey('daily-post-naive', day).toString();
        await Promise.all(
          naivePools.flatMap((pool, replica) =>
            Array.from({ length: PATHS_PER_REPLICA }, async () => {
              operations++;
              // Session-level advisory lock on WHICHEVER pooled client runs this statement (the bug).
              const got = await pool.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [key]);
              if (!got.rows[0]?.ok) return; // "lock_held, skipping"
              try {
                // No lock: check-then-insert, protected only by the (misplaced) advisory lock.
                const exists = await pool.query('SELECT 1 FROM naive_posts WHERE day = $1', [day]);
                if (exists.rowCount === 0) {
                  await pool.query('INSERT INTO naive_posts (day, replica) VALUES ($1, $2)', [day, replica]);
                }
              } finally {
                // Unlock on whichever client the pool hands out now: often not the one holding the lock.
                await pool.query('SELECT pg_advisory_unlock($1)', [key]).catch(() => {});
              }
            }),
          ),
        );
        context.onProgress(++progress, total);
      }
      leaked = (await findLeakedAdvisoryLocks(admin, { idleFor: 0 }))._unsafeUnwrap().length;
    } finally {
      await Promise.all(naivePools.map((p) => p.end()));
    }
    const naive = side(operations, (await postAnomalies(admin, 'naive_posts', days)) + leaked, t0);

    // Pattern side.
    operations = 0;
    t0 = performance.now();
    const patternPools = pools(context.url, replicas, 'pattern');
    let patternLeaked = 0;
    try {
      const managers = patternPools.map((p) => new TxManager(p));
      for (let day = 1; day <= days && !context.signal.aborted; day++) {
        await Promise.all(
          managers.flatMap((tm, replica) =>
            Array.from({ length: PATHS_PER_REPLICA }, async () => {
              for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
                operations++;
                const result = await singleRun(tm, { name: 'daily-post', key: String(day) }, async (tx) => {
                  await tx.query('INSERT INTO pattern_posts (day, replica) VALUES ($1, $2)', [day, replica]);
                  return { day, replica };
                });
                if (result.isOk() || result.error.kind !== 'LockBusy') return;
                await new Promise((r) => setTimeout(r, 1 + Math.random() * 4)); // jittered retry
              }
            }),
          ),
        );
        context.onProgress(++progress, total);
      }
      patternLeaked = (await findLeakedAdvisoryLocks(admin, { idleFor: 0 }))._unsafeUnwrap().length;
    } finally {
      await Promise.all(patternPools.map((p) => p.end()));
    }
    const pattern = side(operations, (await postAnomalies(admin, 'pattern_posts', days)) + patternLeaked, t0);
    return {
      naive,
      pattern,
      anomalyLabel: 'duplicate/missing posts + leaked locks',
      note: `${replicas} replicas × ${PATHS_PER_REPLICA} paths, ${days} days; naive leaked ${leaked} session lock(s)`,
    };
  } finally {
    await admin.end();
  }
}

/** Demo scenarios of the advisory-locks module. */
export const scenarios: Scenario[] = [
  {
    id: 'daily-post',
    title: 'Daily job on many replicas',
    pattern: 'singleRun',
    run: runDailyPost,
  },
];
