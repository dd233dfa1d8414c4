/** What one session waits for: the ungranted row of `pg_locks` for its pid. */
export interface LockWait {
  /** `pg_locks.locktype`: 'relation', 'transactionid' (a row lock: waiting for the holder's transaction), 'tuple', 'advisory' … */
  readonly locktype: string;
  /** Requested mode, e.g. 'AccessExclusiveLock', 'ShareLock'. */
  readonly mode: string;
  /** The relation (as `regclass` text) for relation/tuple/page locks in this database, else null. */
  readonly relation: string | null;
  /** The transaction id waited for (row-lock waits), as a decimal string, else null. */
  readonly transactionId: string | null;
  /** The advisory key waited for (decimal 64-bit, or 'a,b' for the two-int4 form), else null. */
  readonly advisoryKey: string | null;
}

/** One backend as the report sees it (`pg_stat_activity` + its lock wait). */
export interface SessionInfo {
  /** Backend pid. */
  readonly pid: number;
  /** Database name (null for backends attached to none). */
  readonly database: string | null;
  /** Role name. */
  readonly user: string | null;
  /** The session's `application_name` (null when hidden). */
  readonly applicationName: string | null;
  /** Client address, null for Unix sockets (and when hidden). */
  readonly clientAddr: string | null;
  /** 'client backend', 'autovacuum worker' … */
  readonly backendType: string | null;
  /** 'active', 'idle', 'idle in transaction', 'idle in transaction (aborted)' …; null when hidden. */
  readonly state: string | null;
  /** `pg_stat_activity.wait_event_type`: 'Lock' while waiting for a lock; null when not waiting. */
  readonly waitEventType: string | null;
  /** `pg_stat_activity.wait_event`: 'relation', 'transactionid', 'tuple', 'advisory' …; null when not waiting. */
  readonly waitEvent: string | null;
  /** The current (or last) query, collapsed, truncated and optionally redacted; '<insufficient privilege>' when hidden. */
  readonly query: string | null;
  /** Age of the open transaction in ms (null when none, or hidden). */
  readonly xactAgeMs: number | null;
  /** Age of the current (or last) query in ms. */
  readonly queryAgeMs: number | null;
  /** Time since the last state change in ms (how long it has been idle, for idle sessions). */
  readonly stateAgeMs: number | null;
  /** How long it has waited for its lock in ms (`pg_locks.waitstart`, else state_change), null when not waiting. */
  readonly waitAgeMs: number | null;
  /** The lock it waits for, or null. */
  readonly waitingFor: LockWait | null;
  /** `pg_blocking_pids(pid)`: who holds or is queued ahead with a conflicting lock. Empty when not waiting. */
  readonly blockedBy: readonly number[];
  /** How many locks it holds (granted rows of `pg_locks`). */
  readonly locksHeld: number;
  /** Whether the row was hidden from the current role (`<insufficient privilege>`). */
  readonly hidden: boolean;
}
