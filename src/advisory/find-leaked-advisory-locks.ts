import { err, ok, type Result } from 'neverthrow';
import { z } from 'zod/v4';
import type { InvalidOptions } from '../errors/index.js';
import { durationSchema } from '../tx/duration.js';
import type { Queryable } from '../tx/types.js';
import { type AnyAdvisoryKey, keyFromLockTag } from './advisory-key.js';
import { parseOptions } from './parse-options.js';

/** One advisory lock (held or awaited) as `pg_locks` + `pg_stat_activity` show it. */
export interface AdvisoryLockInfo {
  /** Backend pid of the session. */
  readonly pid: number;
  /** The key: a bigint (one-argument form) or `{ namespace, id }` (two-int32 form). */
  readonly key: AnyAdvisoryKey;
  /** True when held, false when the session is waiting for it. */
  readonly granted: boolean;
  /** 'ExclusiveLock' (pg_advisory_lock…) or 'ShareLock' (pg_advisory_lock_shared…). */
  readonly mode: string;
  /** Database name. */
  readonly database: string;
  /** The session's `application_name` ('' when unset). */
  readonly applicationName: string;
  /** Client address, or null for a Unix socket / unknown. */
  readonly clientAddr: string | null;
  /** Role name of the session. */
  readonly user: string | null;
  /** `pg_stat_activity.state`: 'idle', 'active', 'idle in transaction' … */
  readonly state: string | null;
  /** Milliseconds since the session's state last changed (how long it has been idle, when idle). */
  readonly stateForMs: number;
  /** The session's last (or current) statement. */
  readonly query: string | null;
}

// No lock taken: reads pg_locks (the lock manager's shared table) joined to pg_stat_activity. Advisory
// tags store a bigint key as classid = high 32 bits, objid = low 32 bits, objsubid = 1; a two-int4 key
// as classid, objid with objsubid = 2 (reassembled in TypeScript).
const LIST_SQL = `SELECT l.pid, l.classid::bigint AS classid, l.objid::bigint AS objid, l.objsubid::int AS objsubid,
       l.granted, l.mode, d.datname AS database, coalesce(a.application_name, '') AS application_name,
       host(a.client_addr) AS client_addr, a.usename AS user, a.state, a.query,
       (extract(epoch FROM (clock_timestamp() - coalesce(a.state_change, a.backend_start))) * 1000)::float8 AS state_for_ms
  FROM pg_locks l
  JOIN pg_database d ON d.oid = l.database
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory'
   AND ($1::boolean OR d.datname = current_database())
   AND l.pid IS DISTINCT FROM pg_backend_pid()
 ORDER BY l.granted DESC, l.pid, l.classid, l.objid`;

interface Row {
  pid: number;
  classid: string;
  objid: string;
  objsubid: number;
  granted: boolean;
  mode: string;
  database: string;
  application_name: string;
  client_addr: string | null;
  user: string | null;
  state: string | null;
  query: string | null;
  state_for_ms: number;
}

const listSchema = z
  .object({
    /** Every database of the server instead of the current one (advisory keys are per database). */
    allDatabases: z.boolean().default(false),
  })
  .strict();

const leakedSchema = listSchema
  .extend({
    /** Only sessions idle (not in a transaction) for longer than this. Default 1 minute. */
    idleFor: durationSchema.default(60_000),
  })
  .strict();

/** Options of {@link listAdvisoryLocks}. */
export type ListAdvisoryLocksOptions = z.input<typeof listSchema>;
/** Options of {@link findLeakedAdvisoryLocks}. */
export type FindLeakedAdvisoryLocksOptions = z.input<typeof leakedSchema>;

function toInfo(row: Row): AdvisoryLockInfo {
  return {
    pid: row.pid,
    key: keyFromLockTag(Number(row.classid), Number(row.objid), row.objsubid),
    granted: row.granted,
    mode: row.mode,
    database: row.database,
    applicationName: row.application_name,
    clientAddr: row.client_addr,
    user: row.user,
    state: row.state,
    stateForMs: Math.max(0, Math.round(row.state_for_ms)),
    query: row.query,
  };
}

/**
 * Every advisory lock held or awaited in the current database (or all of them), with the session
 * behind it. For lock reports and debugging; reading it takes no lock.
 *
 * @example
 * const locks = await listAdvisoryLocks(pool);
 * if (locks.isOk()) for (const l of locks.value) console.log(l.pid, l.applicationName, l.key, l.granted);
 */
export async function listAdvisoryLocks(
  db: Queryable,
  options: ListAdvisoryLocksOptions = {},
): Promise<Result<AdvisoryLockInfo[], InvalidOptions>> {
  const parsed = parseOptions(listSchema, options);
  if (parsed.isErr()) return err(parsed.error);
  const { rows } = await db.query<Row>(LIST_SQL, [parsed.value.allDatabases]);
  return ok(rows.map(toInfo));
}

/**
 * Advisory locks that look leaked: held by a session that is `idle` (NOT in a transaction, so these
 * are session-level locks: a transaction-scoped lock cannot outlive its transaction) and has been idle
 * for longer than `idleFor`. That is the signature of the classic leaks — a lock taken with
 * `pool.query` and unlocked on another pooled client, or a pinned client released without unlocking:
 * the pooled connection sits idle holding the lock, and every `pg_try_advisory_lock` elsewhere says
 * "busy" forever. A healthy {@link SessionLock} leader is idle between checks too, but never longer
 * than its `checkEvery`: pick `idleFor` well above that.
 *
 * Remedy: fix the code (transaction-scoped locks, or lock/unlock on one dedicated client); to free a
 * lock now, `SELECT pg_terminate_backend(pid)` on the reported session.
 *
 * @example
 * const leaked = await findLeakedAdvisoryLocks(pool, { idleFor: '5min' });
 * if (leaked.isOk()) for (const l of leaked.value) console.warn(`pid ${l.pid} (${l.applicationName}) holds ${l.key}`);
 */
export async function findLeakedAdvisoryLocks(
  db: Queryable,
  options: FindLeakedAdvisoryLocksOptions = {},
): Promise<Result<AdvisoryLockInfo[], InvalidOptions>> {
  const parsed = parseOptions(leakedSchema, options);
  if (parsed.isErr()) return err(parsed.error);
  const { rows } = await db.query<Row>(LIST_SQL, [parsed.value.allDatabases]);
  return ok(
    rows.map(toInfo).filter((l) => l.granted && l.state === 'idle' && l.stateForMs >= parsed.value.idleFor),
  );
}
