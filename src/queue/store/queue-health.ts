import type { ResultAsync } from 'neverthrow';
import pg from 'pg';
import type { DatabaseFailure } from '../../errors/errors.js';
import { runQuery } from '../../patterns/run-query.js';
import type { Db } from '../../tx/types.js';

/** A count that stops at a cap: exact when below it, "at least `count`" when `exact` is false. */
export interface BoundedCount {
  /** The count, or the cap when `exact` is false. */
  readonly count: number;
  /** false when the count reached the cap: there are at least `count` jobs. */
  readonly exact: boolean;
}

/**
 * What {@link Queue.metrics} (and `pg-txkit doctor`) report: cheap at any backlog. Counts by state are
 * bounded scans of the partial indexes, exact below `cap` (default 10 000) and a lower bound above
 * it; the oldest ready job's age is exact (one index probe per distinct priority); the table figures
 * are the statistics' estimates (no scan at all).
 */
export interface QueueMetrics {
  /** Pending jobs (scheduled ones included). Bounded count. */
  readonly pending: BoundedCount;
  /** Pending jobs that could run now. Bounded count. */
  readonly ready: BoundedCount;
  /** Running (leased) jobs. Bounded count. */
  readonly running: BoundedCount;
  /** Running jobs whose lease expired (the reaper's work; 0 in a healthy queue). Bounded count. */
  readonly expired: BoundedCount;
  /** Dead jobs, waiting for redrive or cancel. Bounded count. */
  readonly dead: BoundedCount;
  /** Age in ms of the oldest job that could run now (0 when none): the queue's lag. Exact. */
  readonly oldestReadyMs: number;
  /** The jobs table, from PostgreSQL's statistics (estimates, updated by vacuum/analyze and the stats collector). */
  readonly table: {
    /** Live rows (pg_stat_user_tables.n_live_tup). */
    readonly liveTuples: number;
    /** Dead rows not yet vacuumed (n_dead_tup): bloat that every claim steps over. */
    readonly deadTuples: number;
    /** Table + indexes + TOAST size in bytes (pg_total_relation_size). */
    readonly totalBytes: number;
    /** Last autovacuum of the table, if any. */
    readonly lastAutovacuum: Date | null;
  };
}

/** Distinct priorities the oldest-ready probe visits at most (beyond them the age is a lower bound). */
const PRIORITY_PROBES = 1000;

/**
 * The metrics statement of a queue schema. Lock: ACCESS SHARE on jobs (plain reads under an MVCC
 * snapshot: blocks nothing but DDL); the statistics views and pg_class take none. Its cost is bounded
 * whatever the backlog: each count reads at most `$1` entries of a partial index (jobs_claimable,
 * jobs_leases, jobs_dead: no row of another state is visited; an index-only scan once the visibility
 * map is set), and the oldest ready job is found by a loose index scan of jobs_claimable (priority,
 * run_at, id): one probe per distinct priority, each reading the first ready entry of that priority —
 * not min(run_at) over every pending row.
 *
 * @example
 * await pool.query(queueMetricsSql('pgtxkit_queue'), [10_000, 'pgtxkit_queue']);
 */
export function queueMetricsSql(schema: string): string {
  const jobs = `${pg.escapeIdentifier(schema)}.jobs`;
  const bounded = (where: string) =>
    `(SELECT count(*)::int FROM (SELECT 1 FROM ${jobs} WHERE ${where} LIMIT $1) b)`;
  return `
    WITH RECURSIVE p(priority, depth) AS (
      (SELECT priority, 1 FROM ${jobs} WHERE state = 'pending' ORDER BY priority LIMIT 1)
      UNION ALL
      SELECT (SELECT j.priority FROM ${jobs} j WHERE j.state = 'pending' AND j.priority > p.priority
               ORDER BY j.priority LIMIT 1), p.depth + 1
        FROM p WHERE p.priority IS NOT NULL AND p.depth < ${PRIORITY_PROBES}
    ),
    oldest AS (
      SELECT min((SELECT j.run_at FROM ${jobs} j
                   WHERE j.state = 'pending' AND j.priority = p.priority AND j.run_at <= now()
                   ORDER BY j.run_at LIMIT 1)) AS run_at
        FROM p WHERE p.priority IS NOT NULL
    )
    SELECT ${bounded(`state = 'pending'`)} AS pending,
           ${bounded(`state = 'pending' AND run_at <= now()`)} AS ready,
           ${bounded(`state = 'running'`)} AS running,
           ${bounded(`state = 'running' AND lease_expires_at < now()`)} AS expired,
           ${bounded(`state = 'dead'`)} AS dead,
           (SELECT greatest(0, extract(epoch FROM now() - run_at) * 1000)::float8 FROM oldest) AS oldest_ready_ms,
           coalesce(s.n_live_tup, 0)::float8 AS live_tuples,
           coalesce(s.n_dead_tup, 0)::float8 AS dead_tuples,
           s.last_autovacuum,
           pg_total_relation_size(${pg.escapeLiteral(`${pg.escapeIdentifier(schema)}.jobs`)}::regclass)::float8 AS total_bytes
      FROM (SELECT 1) one
      LEFT JOIN pg_stat_user_tables s ON s.schemaname = $2 AND s.relname = 'jobs'`;
}

/** The counts by state and the oldest ready age, as `stats()` and the metrics statement return them. */
export interface StateCountsRow {
  pending: number;
  ready: number;
  running: number;
  expired: number;
  dead: number;
  oldest_ready_ms: number | null;
}

interface MetricsRow extends StateCountsRow {
  live_tuples: number;
  dead_tuples: number;
  last_autovacuum: Date | null;
  total_bytes: number;
}

/**
 * Reads the {@link QueueMetrics} of the queue in `schema` on `db` (one statement, bounded cost). Used
 * by `queue.metrics()` and `pg-txkit doctor`.
 *
 * @example
 * const m = await readQueueMetrics(pool, 'pgtxkit_queue', 10_000);
 * if (m.isOk()) console.log(m.value.ready.count, m.value.oldestReadyMs);
 */
export function readQueueMetrics(
  db: Db,
  schema: string,
  cap: number,
): ResultAsync<QueueMetrics, DatabaseFailure> {
  const bounded = (n: number): BoundedCount => ({ count: n, exact: n < cap });
  return runQuery<MetricsRow>(db, queueMetricsSql(schema), [cap, schema]).map((res) => {
    const r = res.rows[0];
    return {
      pending: bounded(r?.pending ?? 0),
      ready: bounded(r?.ready ?? 0),
      running: bounded(r?.running ?? 0),
      expired: bounded(r?.expired ?? 0),
      dead: bounded(r?.dead ?? 0),
      oldestReadyMs: Math.round(r?.oldest_ready_ms ?? 0),
      table: {
        liveTuples: r?.live_tuples ?? 0,
        deadTuples: r?.dead_tuples ?? 0,
        totalBytes: r?.total_bytes ?? 0,
        lastAutovacuum: r?.last_autovacuum ?? null,
      },
    };
  });
}
