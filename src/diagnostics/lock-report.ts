import { err, ok, type Result, ResultAsync } from 'neverthrow';
import { z } from 'zod/v4';
import { findLeakedAdvisoryLocks } from '../advisory/find-leaked-advisory-locks.js';
import { classifyOrRethrow, type DatabaseFailure, InvalidOptions } from '../errors/index.js';
import { durationSchema } from '../tx/duration.js';
import type { Queryable } from '../tx/types.js';
import { type BlockingNode, buildBlockingForest, queuedBehind } from './blocking-forest.js';
import { redactQuery, truncateQuery } from './redact-query.js';
import type { LockWait, SessionInfo } from './session.js';

const lockReportOptionsSchema = z
  .object({
    /** A session idle in transaction for longer than this is reported. Default 30 s. */
    idleInTransactionMs: durationSchema.default(30_000),
    /** A lock wait longer than this is reported as a long wait. Default 5 s. */
    longWaitMs: durationSchema.default(5_000),
    /** Queries are collapsed and cut to this many characters. Default 200. */
    queryMaxLength: z.number().int().min(10).max(100_000).default(200),
    /** Replace literals in query texts with `$?` (values never leave the database). Default false. */
    redact: z.boolean().default(false),
    /**
     * A session-level advisory lock whose holder has been idle (outside a transaction) longer than this
     * is reported as probably leaked (findLeakedAdvisoryLocks of the advisory module). Default 60 s.
     */
    advisoryIdleMs: durationSchema.default(60_000),
    /** Report every database of the server, not only the one connected to. Default false. */
    allDatabases: z.boolean().default(false),
  })
  .strict();

/** Options of {@link lockReport}. */
export type LockReportOptions = z.input<typeof lockReportOptionsSchema>;
type ParsedOptions = z.output<typeof lockReportOptionsSchema>;

/**
 * A lock-queue cascade (the classic "site frozen on a Friday evening" incident): a session waiting for a strong lock
 * (ACCESS EXCLUSIVE for ALTER TABLE …) with sessions queued behind it. The waiting session is the
 * root cause: while it waits, every later request that conflicts with it queues too, even requests
 * compatible with the lock actually held.
 */
export interface LockCascade {
  /** The waiting session (e.g. the ALTER TABLE). Cancelling it releases the queue. */
  readonly rootCause: SessionInfo;
  /** Its requested mode, e.g. 'AccessExclusiveLock'. */
  readonly mode: string;
  /** The relation it waits for. */
  readonly relation: string | null;
  /** The sessions it waits for (`pg_blocking_pids` of the root cause): the lock holders. */
  readonly waitsFor: readonly number[];
  /** Pids queued behind it, directly or transitively. */
  readonly queued: readonly number[];
}

/** An advisory lock row of `pg_locks` with its session. */
export interface AdvisoryLockHolder {
  /** Backend pid of the session that holds (or waits for) the lock. */
  readonly pid: number;
  /** Decimal key: the 64-bit key (objsubid 1) or 'a,b' for the two-int4 form (objsubid 2). */
  readonly key: string;
  /** The 64-bit key as a bigint when taken with the one-argument form, else null. */
  readonly key64: bigint | null;
  /** The two int4 keys when taken with the two-argument form, else null. */
  readonly key32: readonly [number, number] | null;
  /** True when held, false while waiting for it. */
  readonly granted: boolean;
  /** 'ExclusiveLock' or 'ShareLock' (the `_shared` functions). */
  readonly mode: string;
  /** Holder's state ('idle' while holding one means a session-level lock). */
  readonly state: string | null;
  /** Role name of the session. */
  readonly user: string | null;
  /** The session's `application_name`. */
  readonly applicationName: string | null;
  /** Time since the holder's last state change, ms. */
  readonly stateAgeMs: number | null;
  /**
   * True when the holder is outside any transaction, so the lock must be session-level (taken with
   * `pg_advisory_lock`, released only by unlock or disconnect); null when it cannot be told.
   */
  readonly sessionLevel: boolean | null;
  /**
   * A granted session-level lock whose holder has been idle longer than `advisoryIdleMs`: probably leaked
   * (from `findLeakedAdvisoryLocks`).
   */
  readonly suspectedLeak: boolean;
}

/** An action the report suggests, with the SQL to do it. */
export interface SuggestedAction {
  /** The backend to act on. */
  readonly pid: number;
  /** 'cancel' stops the running query; 'terminate' closes the session (needed for idle-in-transaction). */
  readonly action: 'cancel' | 'terminate';
  /** The statement that does it (`SELECT pg_cancel_backend(…)` / `pg_terminate_backend(…)`). */
  readonly sql: string;
  /** Why, in one sentence: what it blocks and for how long. */
  readonly reason: string;
}

/** What the current role could see. */
export interface Visibility {
  /** True when some sessions' details were hidden (`<insufficient privilege>`). */
  readonly limited: boolean;
  /** Why, and how to see everything. */
  readonly reason: string | null;
  /** How many sessions were hidden. */
  readonly hiddenSessions: number;
}

/** The result of {@link lockReport}. */
export interface LockReport {
  /** When the snapshot was taken (server clock). */
  readonly takenAt: Date;
  /** The database connected to. */
  readonly database: string;
  /** The role the report ran as. */
  readonly role: string;
  /** The server's `server_version`. */
  readonly serverVersion: string;
  /** What this role could see (hidden sessions without `pg_monitor`). */
  readonly visibility: Visibility;
  /** Every session the report looked at (client backends and autovacuum workers, except itself). */
  readonly sessions: readonly SessionInfo[];
  /** Who blocks whom: root blockers first. */
  readonly forest: readonly BlockingNode[];
  /** Lock-queue cascades, the biggest first: the root cause of a frozen table. */
  readonly cascades: readonly LockCascade[];
  /** Wait cycles not yet broken by the deadlock detector (usually empty: it runs after deadlock_timeout). */
  readonly waitCycles: readonly (readonly number[])[];
  /** Sessions idle in transaction longer than the threshold (oldest first). */
  readonly idleInTransaction: readonly SessionInfo[];
  /** Sessions waiting for a lock longer than the threshold (longest first). */
  readonly longWaits: readonly SessionInfo[];
  /** Advisory locks held or awaited. */
  readonly advisoryLocks: readonly AdvisoryLockHolder[];
  /** Suggested actions, most urgent first. */
  readonly suggestions: readonly SuggestedAction[];
  /** Whether anything needs attention (blocking, cascade, idle in transaction, long wait, suspected leak). */
  readonly healthy: boolean;
}

/** Modes that conflict with ROW EXCLUSIVE (writers) or weaker: a queue forms behind them. */
const STRONG_MODES = new Set(['ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock']);

/**
 * Sessions and what each waits for: ONE statement, so one snapshot of `pg_stat_activity` and one copy
 * of the lock table. Read-only; locks: AccessShareLock on the catalogs it reads (pg_database, and
 * pg_class through `regclass`), nothing on user tables. `pg_locks` and `pg_blocking_pids()` take the
 * lock manager's partition LWLocks for a moment to copy its state (no heavyweight lock), so
 * `pg_blocking_pids` is only called for sessions that wait on a lock.
 */
const SESSIONS_SQL = `
WITH locks AS MATERIALIZED (
  SELECT pid, locktype, mode, granted, database, relation, transactionid, classid, objid, objsubid, waitstart
  FROM pg_catalog.pg_locks
  WHERE pid IS NOT NULL
), this_db AS (
  SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()
), waits AS (
  SELECT DISTINCT ON (pid) pid, locktype, mode, database, relation, transactionid, classid, objid, objsubid, waitstart
  FROM locks WHERE NOT granted ORDER BY pid, waitstart NULLS LAST
), held AS (
  SELECT pid, count(*)::int AS n FROM locks WHERE granted GROUP BY pid
)
SELECT a.pid, a.datname, a.usename, a.application_name, host(a.client_addr) AS client_addr, a.backend_type,
       a.state, a.wait_event_type, a.wait_event, a.query,
       (extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::float8 AS xact_age_ms,
       (extract(epoch FROM clock_timestamp() - a.query_start) * 1000)::float8 AS query_age_ms,
       (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::float8 AS state_age_ms,
       (extract(epoch FROM clock_timestamp() - w.waitstart) * 1000)::float8 AS wait_age_ms,
       CASE WHEN a.wait_event_type = 'Lock' THEN pg_catalog.pg_blocking_pids(a.pid) ELSE '{}'::int[] END AS blocked_by,
       w.locktype AS wait_locktype, w.mode AS wait_mode,
       CASE WHEN w.relation IS NULL THEN NULL
            WHEN w.database = (SELECT oid FROM this_db) THEN w.relation::regclass::text
            ELSE w.relation::text END AS wait_relation,
       w.transactionid::text AS wait_xid, w.classid::int8 AS wait_classid, w.objid::int8 AS wait_objid,
       w.objsubid AS wait_objsubid,
       coalesce(h.n, 0) AS locks_held
FROM pg_catalog.pg_stat_activity a
LEFT JOIN waits w ON w.pid = a.pid
LEFT JOIN held h ON h.pid = a.pid
WHERE a.pid <> pg_catalog.pg_backend_pid()
  AND (a.backend_type IN ('client backend', 'autovacuum worker') OR a.backend_type IS NULL)
ORDER BY a.pid`;

/**
 * Advisory locks (granted and awaited) with their sessions: one statement over `pg_locks`.
 * Read-only; no heavyweight lock (a copy of the lock table), AccessShareLock on pg_database.
 */
const ADVISORY_SQL = `
SELECT l.pid, l.granted, l.mode, l.classid::int8 AS classid, l.objid::int8 AS objid, l.objsubid,
       l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) AS this_db,
       a.state, a.usename, a.application_name, a.backend_xid IS NOT NULL OR a.xact_start IS NOT NULL AS in_xact,
       a.query = '<insufficient privilege>' AS hidden,
       (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::float8 AS state_age_ms
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.pid IS NOT NULL AND l.pid <> pg_catalog.pg_backend_pid()
ORDER BY l.granted DESC, l.pid`;

/** Who am I, where, which server: no locks beyond the catalog reads of current_setting. */
const IDENTITY_SQL = `
SELECT current_database() AS database, current_user AS role, current_setting('server_version') AS version,
       clock_timestamp() AS taken_at,
       pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS can_read_all`;

interface SessionRow {
  pid: number;
  datname: string | null;
  usename: string | null;
  application_name: string | null;
  client_addr: string | null;
  backend_type: string | null;
  state: string | null;
  wait_event_type: string | null;
  wait_event: string | null;
  query: string | null;
  xact_age_ms: number | null;
  query_age_ms: number | null;
  state_age_ms: number | null;
  wait_age_ms: number | null;
  blocked_by: number[] | null;
  wait_locktype: string | null;
  wait_mode: string | null;
  wait_relation: string | null;
  wait_xid: string | null;
  wait_classid: string | null;
  wait_objid: string | null;
  wait_objsubid: number | null;
  locks_held: number;
}

interface AdvisoryRow {
  pid: number;
  granted: boolean;
  mode: string;
  classid: string;
  objid: string;
  objsubid: number;
  this_db: boolean;
  state: string | null;
  usename: string | null;
  application_name: string | null;
  in_xact: boolean | null;
  hidden: boolean | null;
  state_age_ms: number | null;
}

interface IdentityRow {
  database: string;
  role: string;
  version: string;
  taken_at: Date;
  can_read_all: boolean;
}

const HIDDEN = '<insufficient privilege>';

/**
 * Takes a lock report: who blocks whom (the blocking forest from `pg_blocking_pids`, so row-lock
 * waits on a transaction id appear as well as relation locks), lock-queue cascades (a waiting strong
 * lock with a queue behind it, named as the root cause), sessions idle in transaction, long lock waits
 * and advisory lock holders, with suggested actions.
 *
 * Safe on production: three read-only statements, no lock on user tables. Works for a role with
 * `pg_monitor` (or `pg_read_all_stats`); with less it reports what it could not see in `visibility`.
 *
 * @example
 * const report = await lockReport(pool, { idleInTransactionMs: '10s', redact: true });
 * if (report.isOk()) {
 *   for (const c of report.value.cascades) console.log(`root cause: pid ${c.rootCause.pid}, ${c.queued.length} queued`);
 * }
 */
export function lockReport(
  pool: Queryable,
  options: LockReportOptions = {},
): ResultAsync<LockReport, InvalidOptions | DatabaseFailure> {
  const parsed = lockReportOptionsSchema.safeParse(options);
  if (!parsed.success) {
    return new ResultAsync(
      Promise.resolve(
        err(
          new InvalidOptions(
            parsed.error.issues.map((i) => ({ path: i.path, message: i.message, code: i.code })),
            parsed.error,
          ),
        ),
      ),
    );
  }
  return new ResultAsync(take(pool, parsed.data));
}

async function take(pool: Queryable, options: ParsedOptions): Promise<Result<LockReport, DatabaseFailure>> {
  let identity: IdentityRow;
  let sessionRows: SessionRow[];
  let advisoryRows: AdvisoryRow[];
  let leaked: ReadonlySet<string>;
  try {
    identity = (await pool.query<IdentityRow>(IDENTITY_SQL)).rows[0] as IdentityRow;
    sessionRows = (await pool.query<SessionRow>(SESSIONS_SQL)).rows;
    advisoryRows = (await pool.query<AdvisoryRow>(ADVISORY_SQL)).rows;
    // The advisory module's own leak finder (session-level locks held by idle sessions): one more read of
    // pg_locks + pg_stat_activity, no lock.
    const found = await findLeakedAdvisoryLocks(pool, {
      idleFor: options.advisoryIdleMs,
      allDatabases: options.allDatabases,
    });
    leaked = new Set(
      (found.isOk() ? found.value : []).map(
        (l) => `${l.pid}:${typeof l.key === 'bigint' ? l.key.toString() : `${l.key.namespace},${l.key.id}`}`,
      ),
    );
  } catch (error) {
    return err(classifyOrRethrow(error));
  }
  return ok(assemble(identity, sessionRows, advisoryRows, leaked, options));
}

function assemble(
  identity: IdentityRow,
  rows: readonly SessionRow[],
  advisoryRows: readonly AdvisoryRow[],
  leaked: ReadonlySet<string>,
  options: ParsedOptions,
): LockReport {
  const all = rows.map((r) => toSession(r, options));
  const sessions = options.allDatabases ? all : inDatabase(all, identity.database);
  const { roots, cycles } = buildBlockingForest(sessions);

  const cascades: LockCascade[] = sessions
    .filter((s) => s.waitingFor?.locktype === 'relation' && STRONG_MODES.has(s.waitingFor.mode))
    .map((s) => ({
      rootCause: s,
      mode: s.waitingFor?.mode ?? '',
      relation: s.waitingFor?.relation ?? null,
      waitsFor: s.blockedBy,
      queued: queuedBehind(sessions, s.pid),
    }))
    .filter((c) => c.queued.length > 0)
    .sort((a, b) => b.queued.length - a.queued.length || a.rootCause.pid - b.rootCause.pid);

  const idleInTransaction = sessions
    .filter(
      (s) => s.state?.startsWith('idle in transaction') && (s.stateAgeMs ?? 0) >= options.idleInTransactionMs,
    )
    .sort((a, b) => (b.xactAgeMs ?? 0) - (a.xactAgeMs ?? 0));

  const longWaits = sessions
    .filter((s) => s.waitingFor !== null && (s.waitAgeMs ?? 0) >= options.longWaitMs)
    .sort((a, b) => (b.waitAgeMs ?? 0) - (a.waitAgeMs ?? 0));

  const advisoryLocks = advisoryRows
    .filter((r) => options.allDatabases || r.this_db)
    .map((r) => toAdvisory(r, leaked));

  const hiddenSessions = all.filter((s) => s.hidden).length;
  const visibility: Visibility =
    hiddenSessions > 0
      ? {
          limited: true,
          reason:
            `${hiddenSessions} session(s) of other roles were hidden (${HIDDEN}): their queries, states and ages ` +
            `are unknown. Grant pg_monitor (or pg_read_all_stats) to ${identity.role} to see them.`,
          hiddenSessions,
        }
      : !identity.can_read_all
        ? {
            limited: true,
            reason: `${identity.role} is not a member of pg_read_all_stats (pg_monitor): sessions of other roles would be hidden.`,
            hiddenSessions,
          }
        : { limited: false, reason: null, hiddenSessions };

  const suggestions = suggest(roots, cascades, idleInTransaction, advisoryLocks);
  return {
    takenAt: identity.taken_at,
    database: identity.database,
    role: identity.role,
    serverVersion: identity.version,
    visibility,
    sessions,
    forest: roots,
    cascades,
    waitCycles: cycles,
    idleInTransaction,
    longWaits,
    advisoryLocks,
    suggestions,
    healthy:
      roots.length === 0 &&
      cascades.length === 0 &&
      idleInTransaction.length === 0 &&
      longWaits.length === 0 &&
      !advisoryLocks.some((a) => a.suspectedLeak),
  };
}

/** Sessions of this database, plus whoever blocks them from elsewhere (transitively). */
function inDatabase(all: readonly SessionInfo[], database: string): SessionInfo[] {
  const byPid = new Map(all.map((s) => [s.pid, s]));
  const keep = new Set(all.filter((s) => s.database === database).map((s) => s.pid));
  const stack = [...keep];
  while (stack.length > 0) {
    const s = byPid.get(stack.pop() as number);
    for (const b of s?.blockedBy ?? []) {
      if (!keep.has(b) && byPid.has(b)) {
        keep.add(b);
        stack.push(b);
      }
    }
  }
  return all.filter((s) => keep.has(s.pid));
}

function toSession(r: SessionRow, options: ParsedOptions): SessionInfo {
  const hidden = r.query === HIDDEN;
  const text = r.query === null || hidden ? r.query : options.redact ? redactQuery(r.query) : r.query;
  const waitingFor: LockWait | null =
    r.wait_locktype === null
      ? null
      : {
          locktype: r.wait_locktype,
          mode: r.wait_mode ?? '',
          relation: r.wait_relation,
          transactionId: r.wait_xid,
          advisoryKey:
            r.wait_locktype === 'advisory' && r.wait_classid !== null && r.wait_objid !== null
              ? advisoryKeyText(r.wait_classid, r.wait_objid, r.wait_objsubid ?? 1)
              : null,
        };
  return {
    pid: r.pid,
    database: r.datname,
    user: r.usename,
    applicationName: r.application_name,
    clientAddr: r.client_addr,
    backendType: r.backend_type,
    state: r.state,
    waitEventType: r.wait_event_type,
    waitEvent: r.wait_event,
    query: text === null ? null : truncateQuery(text, options.queryMaxLength),
    xactAgeMs: round(r.xact_age_ms),
    queryAgeMs: round(r.query_age_ms),
    stateAgeMs: round(r.state_age_ms),
    waitAgeMs: waitingFor === null ? null : round(r.wait_age_ms ?? r.state_age_ms),
    waitingFor,
    blockedBy: [...(r.blocked_by ?? [])].sort((a, b) => a - b),
    locksHeld: r.locks_held,
    hidden,
  };
}

function round(ms: number | null): number | null {
  return ms === null ? null : Math.max(0, Math.round(ms));
}

/**
 * The key of an advisory lock row: objsubid 1 is the one-bigint form, its high 32 bits in classid and
 * low 32 bits in objid; objsubid 2 is the two-int4 form (classid, objid).
 *
 * @example
 * advisoryKeyParts(4294967295, 4294967295, 1); // → { key64: -1n, key32: null }
 * advisoryKeyParts(7, 4294967293, 2); // → { key64: null, key32: [7, -3] }
 */
export function advisoryKeyParts(
  classid: string | number,
  objid: string | number,
  objsubid: number,
): { key64: bigint | null; key32: readonly [number, number] | null } {
  const hi = BigInt(classid);
  const lo = BigInt(objid);
  if (objsubid === 1) return { key64: BigInt.asIntN(64, (hi << 32n) | lo), key32: null };
  return { key64: null, key32: [Number(BigInt.asIntN(32, hi)), Number(BigInt.asIntN(32, lo))] };
}

function advisoryKeyText(classid: string, objid: string, objsubid: number): string {
  const { key64, key32 } = advisoryKeyParts(classid, objid, objsubid);
  return key64 !== null ? key64.toString() : `${key32?.[0]},${key32?.[1]}`;
}

function toAdvisory(r: AdvisoryRow, leaked: ReadonlySet<string>): AdvisoryLockHolder {
  const { key64, key32 } = advisoryKeyParts(r.classid, r.objid, r.objsubid);
  const key = key64 !== null ? key64.toString() : `${key32?.[0]},${key32?.[1]}`;
  const stateAgeMs = round(r.state_age_ms);
  const sessionLevel = r.hidden || r.in_xact === null ? null : !r.in_xact;
  return {
    pid: r.pid,
    key,
    key64,
    key32,
    granted: r.granted,
    mode: r.mode,
    state: r.state,
    user: r.usename,
    applicationName: r.application_name,
    stateAgeMs,
    sessionLevel,
    suspectedLeak: r.granted && leaked.has(`${r.pid}:${key}`),
  };
}

function suggest(
  roots: readonly BlockingNode[],
  cascades: readonly LockCascade[],
  idle: readonly SessionInfo[],
  advisory: readonly AdvisoryLockHolder[],
): SuggestedAction[] {
  const out: SuggestedAction[] = [];
  const seen = new Set<number>();
  const add = (s: SuggestedAction) => {
    if (seen.has(s.pid)) return;
    seen.add(s.pid);
    out.push(s);
  };
  for (const c of cascades) {
    add({
      pid: c.rootCause.pid,
      action: 'cancel',
      sql: `SELECT pg_cancel_backend(${c.rootCause.pid});`,
      reason:
        `it waits for ${c.mode} on ${c.relation ?? 'a relation'} (held by pid ${c.waitsFor.join(', ') || '?'}) ` +
        `and ${c.queued.length} session(s) are queued behind it; cancelling it lets them through at once. ` +
        'Rerun it with safeDdl (a short lock_timeout and retries).',
    });
  }
  for (const root of roots) {
    const s = root.session;
    // A cancel only interrupts a running statement: an idle session (in a transaction or not — a
    // session-level advisory lock outlives transactions) has none, so only terminate frees its locks.
    const idleTx = s.state?.startsWith('idle in transaction') ?? false;
    const idle = idleTx || s.state === 'idle';
    add({
      pid: s.pid,
      action: idle ? 'terminate' : 'cancel',
      sql: idle ? `SELECT pg_terminate_backend(${s.pid});` : `SELECT pg_cancel_backend(${s.pid});`,
      reason: idleTx
        ? `idle in transaction for ${seconds(s.stateAgeMs)} while blocking ${root.blockedCount} session(s); ` +
          'cancel does not end an idle transaction, terminate does (its work rolls back)'
        : idle
          ? `idle for ${seconds(s.stateAgeMs)} while blocking ${root.blockedCount} session(s) with a session-level lock ` +
            '(an advisory lock taken outside a transaction); cancel does nothing to an idle session, terminate releases it'
          : `${s.state ?? 'running'} for ${seconds(s.queryAgeMs)} while blocking ${root.blockedCount} session(s); ` +
            'cancel stops its statement (and rolls back its transaction)',
    });
  }
  for (const s of idle) {
    add({
      pid: s.pid,
      action: 'terminate',
      sql: `SELECT pg_terminate_backend(${s.pid});`,
      reason:
        `idle in transaction for ${seconds(s.stateAgeMs)} (transaction open ${seconds(s.xactAgeMs)}, ${s.locksHeld} lock(s) held); ` +
        'set idle_in_transaction_session_timeout to end such sessions automatically',
    });
  }
  for (const a of advisory) {
    if (!a.suspectedLeak) continue;
    add({
      pid: a.pid,
      action: 'terminate',
      sql: `SELECT pg_terminate_backend(${a.pid});`,
      reason: `holds session-level advisory lock ${a.key} while idle for ${seconds(a.stateAgeMs)}: probably leaked`,
    });
  }
  return out;
}

function seconds(ms: number | null): string {
  return ms === null ? '?' : `${(ms / 1000).toFixed(1)}s`;
}
