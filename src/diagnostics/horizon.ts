import type { ResultAsync } from 'neverthrow';
import type { DatabaseFailure } from '../errors/errors.js';
import { runQuery } from '../patterns/run-query.js';
import type { Db } from '../tx/types.js';
import { redactQuery, truncateQuery } from './redact-query.js';

/**
 * Something that holds the MVCC horizon of the connected database back: while it lasts, no row version
 * deleted or updated after its snapshot (or its transaction id) can be vacuumed or marked dead in an
 * index. A session or a prepared transaction holds back the tables of its own database; a replication
 * slot those of every database.
 */
export interface HorizonHolder {
  /**
   * 'session': a backend with a snapshot or a transaction id (a long query, a REPEATABLE READ or
   * SERIALIZABLE transaction, a session idle in transaction, a long `pg_dump`);
   * 'replication slot': a slot whose `xmin` is set (a physical standby with `hot_standby_feedback`, or a
   * slot nobody consumes); 'prepared transaction': a `PREPARE TRANSACTION` never committed or rolled back.
   */
  readonly kind: 'session' | 'replication slot' | 'prepared transaction';
  /** The session's pid, the slot's name or the prepared transaction's gid. */
  readonly id: string;
  /** The oldest transaction id it holds (its `backend_xmin` / `backend_xid`, the slot's `xmin`, the prepared transaction's). */
  readonly xmin: string;
  /** How many transaction ids were assigned since `xmin` (`age(xmin)`). */
  readonly xidAge: number;
  /** How long it has held it, in ms: the session's transaction age, the prepared transaction's; null for a slot (no time is kept). */
  readonly ageMs: number | null;
  /** The database it belongs to (null for a physical slot). */
  readonly database: string | null;
  /** The session's role, the prepared transaction's owner; null for a slot. */
  readonly user: string | null;
  /** The session's application_name and state ('idle in transaction' …), the slot's type and whether it is active. */
  readonly detail: string;
  /** The session's current (or last) query, truncated (and redacted when asked); null otherwise. */
  readonly query: string | null;
}

/** Thresholds of {@link horizonHolders}. */
export interface HorizonOptions {
  /** A session or prepared transaction holding the horizon for at least this long (ms) is reported. */
  readonly minAgeMs: number;
  /** A replication slot whose xmin is at least this many transaction ids old is reported (a slot keeps no time). */
  readonly minXidAge: number;
  /** Replace the literals of the sessions' queries with `$?` (as the lock report's `redact`). */
  readonly redact: boolean;
}

/** What pg_stat_activity shows for another role's query without pg_read_all_stats. */
const HIDDEN = '<insufficient privilege>';

interface HolderRow {
  kind: HorizonHolder['kind'];
  id: string;
  xmin: string;
  xid_age: number;
  age_ms: number | null;
  database: string | null;
  user: string | null;
  detail: string;
  query: string | null;
}

// Lock: none (statistics and catalog views). Sessions of this database other than this one (and other
// than the walsenders, whose hold is the slot's) that have a snapshot or a transaction id: the older of
// the two is what they hold (a session of another database holds back only the shared catalogs). Their age is their transaction's (a snapshot is at most as old as the transaction that took it).
// Replication slots with an xmin (catalog_xmin holds back the system catalogs only, not the queue's
// tables). Prepared transactions: always a transaction id, for as long as they live.
const HORIZON_SQL = `
  SELECT * FROM (
    SELECT 'session' AS kind, a.pid::text AS id, h.xmin::text AS xmin, age(h.xmin)::float8 AS xid_age,
           (extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, a.query_start, a.backend_start)) * 1000)::float8 AS age_ms,
           a.datname::text AS database, a.usename::text AS "user",
           concat_ws(', ', nullif(a.application_name, ''), a.state) AS detail,
           a.query
      FROM pg_stat_activity a
     CROSS JOIN LATERAL (SELECT CASE WHEN a.backend_xid IS NOT NULL
                                      AND (a.backend_xmin IS NULL OR age(a.backend_xid) > age(a.backend_xmin))
                                     THEN a.backend_xid ELSE a.backend_xmin END AS xmin) h
     WHERE h.xmin IS NOT NULL AND a.pid <> pg_backend_pid() AND a.backend_type <> 'walsender'
       AND (a.datname IS NULL OR a.datname = current_database())
    UNION ALL
    SELECT 'replication slot', s.slot_name::text, s.xmin::text, age(s.xmin)::float8, NULL,
           s.database::text, NULL, concat_ws(', ', s.slot_type, CASE WHEN s.active THEN 'active' ELSE 'inactive' END),
           NULL
      FROM pg_replication_slots s
     WHERE s.xmin IS NOT NULL
    UNION ALL
    SELECT 'prepared transaction', p.gid, p.transaction::text, age(p.transaction)::float8,
           (extract(epoch FROM clock_timestamp() - p.prepared) * 1000)::float8,
           p.database::text, p.owner::text, 'prepared', NULL
      FROM pg_prepared_xacts p
     WHERE p.database = current_database()
  ) h
  WHERE (h.kind = 'replication slot' AND h.xid_age >= $2) OR (h.kind <> 'replication slot' AND h.age_ms >= $1)
  ORDER BY h.xid_age DESC`;

/**
 * What holds the MVCC horizon back in the database `db` is connected to: sessions and prepared transactions
 * older than `minAgeMs`, replication slots whose xmin is at least `minXidAge` transaction ids old; the
 * oldest first. While one of them lasts, a queue's claimed and finished jobs stay in its table and
 * indexes as dead entries that vacuum cannot remove (see docs/queue.md, "What a long transaction does to
 * the queue"). Sessions of other roles show no query without `pg_read_all_stats` (or `pg_monitor`).
 *
 * @example
 * const holders = await horizonHolders(pool, { minAgeMs: 60_000, minXidAge: 100_000, redact: true });
 * if (holders.isOk()) for (const h of holders.value) console.log(h.kind, h.id, h.ageMs);
 */
export function horizonHolders(
  db: Db,
  options: HorizonOptions,
): ResultAsync<HorizonHolder[], DatabaseFailure> {
  return runQuery<HolderRow>(db, HORIZON_SQL, [options.minAgeMs, options.minXidAge]).map((res) =>
    res.rows.map((r) => ({
      kind: r.kind,
      id: r.id,
      xmin: r.xmin,
      xidAge: r.xid_age,
      ageMs: r.age_ms === null ? null : Math.round(r.age_ms),
      database: r.database,
      user: r.user,
      detail: r.detail,
      query:
        r.query === null || r.query === HIDDEN
          ? r.query
          : truncateQuery(options.redact ? redactQuery(r.query) : r.query, 200),
    })),
  );
}
