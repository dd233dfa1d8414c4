import pg from 'pg';
import type { HorizonHolder } from '../diagnostics/horizon.js';
import { runQuery } from '../patterns/run-query.js';
import { type QueueMetrics, readQueueMetrics } from '../queue/store/queue-health.js';

/** A finding about a queue: what is wrong, and what to do. */
export interface QueueFinding {
  readonly severity: 'warning' | 'problem';
  readonly message: string;
}

/** The health of one queue schema, as `pg-txkit doctor` reports it. */
export interface QueueHealthRead extends QueueMetrics {
  readonly schema: string;
  /** The schema's queue migration version. */
  readonly version: number;
  readonly findings: readonly QueueFinding[];
}

/** A queue the doctor could not read (a role without SELECT on it, a statement timeout …). */
export interface QueueHealthUnread {
  readonly schema: string;
  /** What the server said. */
  readonly error: string;
  readonly findings: readonly QueueFinding[];
}

/** One queue in the doctor's report: read, or why not. */
export type QueueHealth = QueueHealthRead | QueueHealthUnread;

/** Thresholds of the queue findings. */
export interface QueueHealthOptions {
  /** The oldest ready job older than this is a finding (ms). */
  readonly lagMs: number;
  /** Counts stop at this many jobs per state. */
  readonly cap: number;
  /** What holds the MVCC horizon back (see horizonHolders): each one is a finding of every queue. */
  readonly holders?: readonly HorizonHolder[] | undefined;
}

const thousands = (n: number) => n.toLocaleString('en-US');

/** `holder` in words: what it is, for how long, and what to do about it. */
function horizonFinding(h: HorizonHolder, deadTuples: number): QueueFinding {
  const held =
    h.ageMs === null
      ? `${thousands(h.xidAge)} transactions`
      : `${Math.round(h.ageMs / 1000)} s (${thousands(h.xidAge)} transactions)`;
  const what =
    h.kind === 'session'
      ? `session ${h.id} (${[h.user, h.detail].filter(Boolean).join(', ')})`
      : `${h.kind} ${h.id} (${h.detail})`;
  const idle = h.kind === 'session' && h.detail.includes('idle in transaction');
  const action =
    h.kind === 'replication slot'
      ? `consume or drop the slot (SELECT pg_drop_replication_slot('${h.id}'))`
      : h.kind === 'prepared transaction'
        ? `COMMIT PREPARED or ROLLBACK PREPARED '${h.id}'`
        : idle
          ? `end it (SELECT pg_terminate_backend(${h.id})) and set idle_in_transaction_session_timeout`
          : `cancel it (SELECT pg_cancel_backend(${h.id})), or run such work on a replica`;
  return {
    // Claims slow down as the dead entries pile up: a problem once they outnumber a small queue.
    severity: deadTuples > 10_000 ? 'problem' : 'warning',
    message:
      `${what} has held the MVCC horizon back for ${held}: meanwhile the jobs table holds ${thousands(deadTuples)} dead tuples ` +
      `vacuum cannot remove, and every claim steps over the index entries of the jobs claimed since; ${action}`,
  };
}

// No lock (catalog reads): schemas that hold a pg-txkit queue — a migrations table, a jobs table and
// the claim_jobs function of queue migration 0001.
const FIND_QUEUES_SQL = `
  SELECT n.nspname AS schema
    FROM pg_namespace n
   WHERE EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'migrations' AND c.relkind = 'r')
     AND EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'jobs' AND c.relkind = 'r')
     AND EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = n.oid AND p.proname = 'claim_jobs')
   ORDER BY 1`;

/**
 * The schemas of the connected database that hold a pg-txkit queue.
 *
 * @example
 * const schemas = await findQueueSchemas(pool); // ['pgtxkit_queue']
 */
export async function findQueueSchemas(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ schema: string }>(FIND_QUEUES_SQL);
  return rows.map((r) => r.schema);
}

function findingsOf(m: QueueMetrics, options: QueueHealthOptions): QueueFinding[] {
  const findings: QueueFinding[] = [];
  const count = (c: { count: number; exact: boolean }) => `${c.count}${c.exact ? '' : '+'}`;
  if (m.expired.count > 0) {
    findings.push({
      severity: 'problem',
      message: `${count(m.expired)} running job(s) with an expired lease: their workers died or stalled; a running worker's reaper returns them (queue.reap())`,
    });
  }
  if (m.dead.count > 0) {
    findings.push({
      severity: 'warning',
      message: `${count(m.dead)} dead job(s): attempts used up; look at last_error, then queue.redrive() or cancel`,
    });
  }
  if (m.oldestReadyMs > options.lagMs) {
    findings.push({
      severity: 'problem',
      message: `the oldest ready job waits for ${Math.round(m.oldestReadyMs / 1000)} s: no worker, or too few (${count(m.ready)} ready)`,
    });
  }
  const { liveTuples, deadTuples } = m.table;
  const holders = options.holders ?? [];
  for (const h of holders) findings.push(horizonFinding(h, deadTuples));
  if (holders.length === 0 && deadTuples > 10_000 && deadTuples > liveTuples) {
    findings.push({
      severity: 'warning',
      message: `${deadTuples} dead tuples for ${liveTuples} live ones in the jobs table: vacuum is behind (a long transaction holding back the horizon?)`,
    });
  }
  return findings;
}

/**
 * Reads each queue's health (one bounded-cost statement per schema, see `queue.metrics()`) and its
 * findings: expired leases, dead jobs, a lagging queue, a bloated table.
 *
 * @example
 * const health = await queueHealth(pool, await findQueueSchemas(pool), { lagMs: 300_000, cap: 10_000 });
 */
export async function queueHealth(
  pool: pg.Pool,
  schemas: readonly string[],
  options: QueueHealthOptions,
): Promise<QueueHealth[]> {
  const out: QueueHealth[] = [];
  for (const schema of schemas) {
    // Plain read of the schema's migrations table (ACCESS SHARE), then the metrics statement.
    const version = await runQuery<{ version: number | null }>(
      pool,
      `SELECT max(version) AS version FROM ${pg.escapeIdentifier(schema)}.migrations`,
    );
    const m = version.isErr() ? version : await readQueueMetrics(pool, schema, options.cap);
    if (m.isErr()) {
      // A failure is the server's answer about THIS queue (permission denied for a pg_monitor role,
      // the doctor's own lock or statement timeout): reported, and the other queues are still read.
      const cause = m.error.cause;
      const error = cause instanceof Error ? cause.message : m.error.message;
      out.push({
        schema,
        error,
        findings: [
          {
            severity: 'problem',
            message: /permission denied/i.test(error)
              ? `could not read the queue (${error}): grant SELECT on ${schema}.jobs and ${schema}.migrations to this role`
              : `could not read the queue (${error})`,
          },
        ],
      });
      continue;
    }
    const read = version.isOk() ? (version.value.rows[0]?.version ?? 0) : 0;
    out.push({ schema, version: read, ...m.value, findings: findingsOf(m.value, options) });
  }
  return out;
}
