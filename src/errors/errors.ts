/**
 * The error taxonomy: one class per failure kind, each with a literal `kind`, typed fields, a fixed
 * message and the driver error (if any) as `cause`. Expected failures travel as values (neverthrow
 * `Err`); `doOrThrow` throws the same objects.
 *
 * @example
 * const result = await tm.do((tx) => tx.query('INSERT INTO users (email) VALUES ($1)', [email]));
 * if (result.isErr() && result.error.kind === 'UniqueViolation') console.log(result.error.constraint);
 */
export abstract class TxKitError extends Error {
  /** The failure kind, a string literal per class: switch on it. */
  abstract readonly kind: string;
  /** `message`: the fixed sentence of the kind; `cause`: the error behind this one (the driver's). */
  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
  }
  /** The class name (`UniqueViolation`, …), so that stack traces and logs say the kind. */
  override get name(): string {
    return this.kind;
  }
}

/** The parts of a PostgreSQL error (pg's `DatabaseError`) that the taxonomy keeps. */
export interface DriverErrorFields {
  /** SQLSTATE (`23505`, `40001`, …). */
  readonly code?: string | undefined;
  /** The server's DETAIL line. */
  readonly detail?: string | undefined;
  /** Constraint name, when the server reports it. */
  readonly constraint?: string | undefined;
  /** Table name, when the server reports it. */
  readonly table?: string | undefined;
  /** Schema name, when the server reports it. */
  readonly schema?: string | undefined;
  /** Column name, when the server reports it. */
  readonly column?: string | undefined;
  /** The server's message. */
  readonly message?: string | undefined;
}

/** Fields shared by the integrity-constraint errors. */
export interface ConstraintFields {
  /** Constraint name (`users_email_key`), when the server reports it. */
  readonly constraint: string | undefined;
  /** Table name, when the server reports it. */
  readonly table: string | undefined;
  /** Schema name, when the server reports it. */
  readonly schema: string | undefined;
  /** Columns named in the server's detail (`Key (email)=(…)`) or its column field. */
  readonly columns: readonly string[];
  /** The server's DETAIL line (may contain the offending values: do not show it to end users). */
  readonly detail: string | undefined;
}

/** Extracts the column list of a `Key (a, b)=(…)` detail line. */
export function columnsFromDetail(detail: string | undefined, column?: string): string[] {
  if (column) return [column];
  if (!detail) return [];
  const match = /Key \((.+?)\)=\(/.exec(detail);
  if (!match?.[1]) return [];
  return match[1].split(',').map((c) => c.trim().replace(/^"(.*)"$/, '$1'));
}

function constraintFields(driver: DriverErrorFields): ConstraintFields {
  return {
    constraint: driver.constraint,
    table: driver.table,
    schema: driver.schema,
    columns: columnsFromDetail(driver.detail, driver.column),
    detail: driver.detail,
  };
}

function on(fields: ConstraintFields): string {
  const c = fields.constraint ? ` "${fields.constraint}"` : '';
  const t = fields.table ? ` on table "${fields.table}"` : '';
  return `${c}${t}`;
}

abstract class ConstraintError extends TxKitError implements ConstraintFields {
  readonly constraint: string | undefined;
  readonly table: string | undefined;
  readonly schema: string | undefined;
  readonly columns: readonly string[];
  readonly detail: string | undefined;
  constructor(what: string, driver: DriverErrorFields, cause?: unknown) {
    const fields = constraintFields(driver);
    super(`${what}${on(fields)}`, cause ?? driver);
    this.constraint = fields.constraint;
    this.table = fields.table;
    this.schema = fields.schema;
    this.columns = fields.columns;
    this.detail = fields.detail;
  }
}

/** 23505: a unique index or constraint refused a duplicate. Not retried. */
export class UniqueViolation extends ConstraintError {
  /** The failure kind, `'UniqueViolation'`: switch on it. */
  readonly kind = 'UniqueViolation' as const;
  /** Built by `classify` from the driver error's fields; `cause` defaults to those fields. */
  constructor(driver: DriverErrorFields, cause?: unknown) {
    super('unique constraint violated', driver, cause);
  }
}

/** 23P01: an EXCLUDE constraint refused an overlapping row (bookings). Not retried. */
export class ExclusionViolation extends ConstraintError {
  /** The failure kind, `'ExclusionViolation'`: switch on it. */
  readonly kind = 'ExclusionViolation' as const;
  /** Built by `classify` from the driver error's fields; `cause` defaults to those fields. */
  constructor(driver: DriverErrorFields, cause?: unknown) {
    super('exclusion constraint violated', driver, cause);
  }
}

/** 23503: a foreign key refused the row. Not retried. */
export class ForeignKeyViolation extends ConstraintError {
  /** The failure kind, `'ForeignKeyViolation'`: switch on it. */
  readonly kind = 'ForeignKeyViolation' as const;
  /** Built by `classify` from the driver error's fields; `cause` defaults to those fields. */
  constructor(driver: DriverErrorFields, cause?: unknown) {
    super('foreign key constraint violated', driver, cause);
  }
}

/** 23514: a CHECK constraint refused the row. Not retried. */
export class CheckViolation extends ConstraintError {
  /** The failure kind, `'CheckViolation'`: switch on it. */
  readonly kind = 'CheckViolation' as const;
  /** Built by `classify` from the driver error's fields; `cause` defaults to those fields. */
  constructor(driver: DriverErrorFields, cause?: unknown) {
    super('check constraint violated', driver, cause);
  }
}

/** 23502: a NOT NULL column got a null. Not retried. */
export class NotNullViolation extends ConstraintError {
  /** The failure kind, `'NotNullViolation'`: switch on it. */
  readonly kind = 'NotNullViolation' as const;
  /** Built by `classify` from the driver error's fields; `cause` defaults to those fields. */
  constructor(driver: DriverErrorFields, cause?: unknown) {
    super('not-null constraint violated', driver, cause);
  }
}

/** 40001: a concurrent transaction changed what this one read (repeatable read / serializable). Retried. */
export class SerializationFailure extends TxKitError {
  /** The failure kind, `'SerializationFailure'`: switch on it. */
  readonly kind = 'SerializationFailure' as const;
  /** The SQLSTATE, `40001`. */
  readonly code = '40001' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super('could not serialize access due to a concurrent transaction', cause);
  }
}

/** 40P01: this transaction was the victim of a deadlock. Retried. */
export class DeadlockDetected extends TxKitError {
  /** The failure kind, `'DeadlockDetected'`: switch on it. */
  readonly kind = 'DeadlockDetected' as const;
  /** The SQLSTATE, `40P01`. */
  readonly code = '40P01' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super('deadlock detected; this transaction was chosen as the victim', cause);
  }
}

/** 55P03: NOWAIT met a held lock, or lock_timeout expired while waiting for one. Retried by default. */
export class LockNotAvailable extends TxKitError {
  /** The failure kind, `'LockNotAvailable'`: switch on it. */
  readonly kind = 'LockNotAvailable' as const;
  /** The SQLSTATE, `55P03`. */
  readonly code = '55P03' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super('lock not available (NOWAIT or lock_timeout)', cause);
  }
}

/** 57014: statement_timeout expired, or the statement was cancelled (`reason` says which). Not retried. */
export class StatementTimeout extends TxKitError {
  /** The failure kind, `'StatementTimeout'`: switch on it. */
  readonly kind = 'StatementTimeout' as const;
  /** The SQLSTATE, `57014`. */
  readonly code = '57014' as const;
  /** 'timeout' for statement_timeout, 'cancel' for pg_cancel_backend or a client-side cancel. */
  readonly reason: 'timeout' | 'cancel';
  constructor(reason: 'timeout' | 'cancel', cause?: unknown) {
    super(reason === 'timeout' ? 'statement timeout expired' : 'statement cancelled', cause);
    this.reason = reason;
  }
}

/**
 * pg's client-side `query_timeout` fired ("Query read timeout"): the client stopped waiting, but the
 * server may still be running the statement. Never retried (each retry would leave one more statement
 * running); the client it ran on is destroyed, not returned to the pool. Prefer `statementTimeout`,
 * which the server enforces.
 */
export class QueryTimeout extends TxKitError {
  /** The failure kind, `'QueryTimeout'`: switch on it. */
  readonly kind = 'QueryTimeout' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super(
      'query_timeout expired on the client; the server may still be running the statement (its connection was discarded)',
      cause,
    );
  }
}

/**
 * 25P03: the server ended the session because the transaction sat idle longer than
 * `idle_in_transaction_session_timeout`. The cause is a slow step inside the transaction (an external
 * call, a wait): a retry would repeat it, so it is not retried by default (opt in with
 * `retryOn: [..., 'IdleInTransactionTimeout']`). The transaction was rolled back.
 */
export class IdleInTransactionTimeout extends TxKitError {
  /** The failure kind, `'IdleInTransactionTimeout'`: switch on it. */
  readonly kind = 'IdleInTransactionTimeout' as const;
  /** The SQLSTATE, `25P03`. */
  readonly code = '25P03' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super(
      'the transaction was idle longer than idle_in_transaction_session_timeout and the server ended it ' +
        '(a slow call inside the transaction? it is not retried, since a retry would repeat it)',
      cause,
    );
  }
}

/**
 * The connection broke (network cut, backend terminated, server restart) before COMMIT was sent: the
 * server rolled the transaction back. Retried on a new connection.
 */
export class ConnectionLost extends TxKitError {
  /** The failure kind, `'ConnectionLost'`: switch on it. */
  readonly kind = 'ConnectionLost' as const;
  /** SQLSTATE when the server said why (57P01 …), else undefined (socket error). */
  readonly code: string | undefined;
  constructor(code: string | undefined, cause?: unknown) {
    super('connection to the database was lost', cause);
    this.code = code;
  }
}

/**
 * 25006 read_only_sql_transaction: the server refused a write because the transaction is read only —
 * either the server is (a hot standby, a demoted primary, `default_transaction_read_only`; what a stale
 * DNS answer after a failover points at) or the transaction was started `readOnly`. The statement
 * did nothing. A read-write transaction is retried on a NEW connection (the refused client is
 * destroyed, never returned to the pool to fail again) until one reaches a writable primary; a
 * `readOnly` one is not retried (its write is the bug).
 *
 * @example
 * const r = await tm.do((tx) => tx.query('INSERT INTO t VALUES (1)'), { readOnly: true });
 * if (r.isErr() && r.error.kind === 'ReadOnlyTransaction') console.log(r.error.code); // '25006'
 */
export class ReadOnlyTransaction extends TxKitError {
  /** The failure kind, `'ReadOnlyTransaction'`: switch on it. */
  readonly kind = 'ReadOnlyTransaction' as const;
  /** The SQLSTATE, `25006`. */
  readonly code = '25006' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super('the server refused a write in a read-only transaction (a hot standby, or readOnly: true)', cause);
  }
}

/**
 * The connection broke while COMMIT was in flight, or the server answered COMMIT that it cannot tell
 * (40003; with `retryMode: 'commit-conflicts'` also 08007 and the internal errors of class XX a
 * distributed engine's commit can raise): the transaction may or may not have committed. Never retried
 * blindly: make the work idempotent, then check.
 */
export class CommitOutcomeUnknown extends TxKitError {
  /** The failure kind, `'CommitOutcomeUnknown'`: switch on it. */
  readonly kind = 'CommitOutcomeUnknown' as const;
  /** `cause`: the error behind this one (the driver's, when there is one). */
  constructor(cause?: unknown) {
    super(
      'the outcome of COMMIT is unknown (the connection was lost during COMMIT, or the server could not tell); the transaction may or may not have committed',
      cause,
    );
  }
}

/** One failed attempt of a retried transaction. */
export interface AttemptRecord {
  /** 1-based attempt number. */
  readonly attempt: number;
  /** The error kind of that attempt. */
  readonly kind: string;
  /** Its SQLSTATE, when there was one. */
  readonly code: string | undefined;
  /** The delay slept before the next attempt (0 for the last one). */
  readonly delayMs: number;
}

/** Every allowed attempt failed with a retryable error (or the deadline/abort stopped the retries). */
export class RetriesExhausted extends TxKitError {
  /** The failure kind, `'RetriesExhausted'`: switch on it. */
  readonly kind = 'RetriesExhausted' as const;
  /** How many attempts ran. */
  readonly attempts: number;
  /** One record per failed attempt, oldest first. */
  readonly history: readonly AttemptRecord[];
  /** The last attempt's error. */
  readonly last: TxKitError;
  constructor(
    attempts: number,
    history: readonly AttemptRecord[],
    last: TxKitError,
    why = 'attempts used up',
  ) {
    super(`transaction failed after ${attempts} attempt(s) (${why}); last error: ${last.kind}`, last);
    this.attempts = attempts;
    this.history = history;
    this.last = last;
  }
}

/** One problem found in options or input (zod's issue shape, reduced to what callers need). */
export interface OptionIssue {
  /** Path of the offending field (`['lockTimeout']`). */
  readonly path: readonly PropertyKey[];
  /** What is wrong with it. */
  readonly message: string;
  /** zod's issue code, when the issue came from zod. */
  readonly code?: string;
}

/** Options or input were invalid. Returned before any SQL was sent. */
export class InvalidOptions extends TxKitError {
  /** The failure kind, `'InvalidOptions'`: switch on it. */
  readonly kind = 'InvalidOptions' as const;
  /** Every problem found. */
  readonly issues: readonly OptionIssue[];
  constructor(issues: readonly OptionIssue[], cause?: unknown) {
    super(
      `invalid options: ${issues.map((i) => `${i.path.map(String).join('.') || '(input)'}: ${i.message}`).join('; ')}`,
      cause,
    );
    this.issues = issues;
  }
}

/** A conditional UPDATE matched 0 rows: its WHERE no longer holds (seat taken, stock short, stale version). */
export class ConditionFailed extends TxKitError {
  /** The failure kind, `'ConditionFailed'`: switch on it. */
  readonly kind = 'ConditionFailed' as const;
  /** Rows the statement changed (0, or fewer than expected). */
  readonly rowCount: number;
  constructor(rowCount = 0) {
    super(`the condition no longer holds (${rowCount} row(s) updated)`);
    this.rowCount = rowCount;
  }
}

/** The row (or rows) asked for do not exist. */
export class NotFound extends TxKitError {
  /** The failure kind, `'NotFound'`: switch on it. */
  readonly kind = 'NotFound' as const;
  /** The table searched, when known. */
  readonly table: string | undefined;
  /** The ids that were not found. */
  readonly ids: readonly unknown[];
  constructor(table?: string, ids: readonly unknown[] = []) {
    super(`not found${table ? ` in "${table}"` : ''}${ids.length ? `: ${ids.map(String).join(', ')}` : ''}`);
    this.table = table;
    this.ids = ids;
  }
}

/** A try-lock found the lock held by someone else; the protected function was not called. */
export class LockBusy extends TxKitError {
  /** The failure kind, `'LockBusy'`: switch on it. */
  readonly kind = 'LockBusy' as const;
  /** The key(s) that were busy, as decimal strings. */
  readonly keys: readonly string[];
  constructor(keys: readonly string[]) {
    super(`lock is held by another session: ${keys.join(', ')}`);
    this.keys = keys;
  }
}

/**
 * A queue job's lease token no longer matches (the lease expired and the job was re-queued or taken by
 * another worker), or a session lock's connection died. Nothing was changed.
 */
export class LeaseLost extends TxKitError {
  /** The failure kind, `'LeaseLost'`: switch on it. */
  readonly kind = 'LeaseLost' as const;
  /** The job id or lock key whose lease was lost. */
  readonly id: string;
  constructor(id: string, cause?: unknown) {
    super(`lease lost for ${id}`, cause);
    this.id = id;
  }
}

/**
 * A queue job was cancelled (`queue.cancel`) while its handler ran: the reason of the handler's
 * `ctx.signal`. The job is gone; the run's settle writes nothing.
 *
 * @example
 * if (isTxKitError(ctx.signal.reason, 'JobCancelled')) console.log('cancelled', ctx.signal.reason.id);
 */
export class JobCancelled extends TxKitError {
  /** The failure kind, `'JobCancelled'`: switch on it. */
  readonly kind = 'JobCancelled' as const;
  /** The job id. */
  readonly id: string;
  constructor(id: string) {
    super(`job ${id} was cancelled`);
    this.id = id;
  }
}

/**
 * One of a queue's schedules could not be handled by a scheduler pass (its next tick could not be
 * computed): that schedule was left as it was, and the pass went on with the others. Reported in the
 * pass's `failed` list and to the worker's `onError` (phase 'schedule').
 *
 * @example
 * const pass = await queue.fireSchedules();
 * if (pass.isOk()) for (const f of pass.value.failed) console.error(f.schedule, f.reason);
 */
export class ScheduleFailed extends TxKitError {
  /** The failure kind, `'ScheduleFailed'`: switch on it. */
  readonly kind = 'ScheduleFailed' as const;
  /** The schedule's name. */
  readonly schedule: string;
  /** What went wrong. */
  readonly reason: string;
  constructor(schedule: string, reason: string, cause?: unknown) {
    super(`schedule ${schedule} was not fired: ${reason}`, cause);
    this.schedule = schedule;
    this.reason = reason;
  }
}

/**
 * A queue schema records a migration that differs from the one this version ships: the migration was
 * edited after it was applied (its recorded sha-256 is not the shipped file's), or the schema was
 * migrated by a build whose history this one does not have. `migrate()` applies nothing then: a frozen
 * migration is never edited, so a difference means the schema is not what the code expects.
 *
 * @example
 * const r = await queue.migrate();
 * if (r.isErr() && r.error.kind === 'MigrationChanged') console.error(r.error.version, r.error.applied, r.error.shipped);
 */
export class MigrationChanged extends TxKitError {
  /** The failure kind, `'MigrationChanged'`: switch on it. */
  readonly kind = 'MigrationChanged' as const;
  /** The schema whose migrations table disagrees. */
  readonly schema: string;
  /** The version that differs. */
  readonly version: number;
  /** What the schema recorded for it: file name and sha-256 (null when the row has no checksum). */
  readonly applied: { readonly name: string; readonly checksum: string | null };
  /** What this version ships for it (null: it ships no such version). */
  readonly shipped: { readonly name: string; readonly checksum: string } | null;
  constructor(
    schema: string,
    version: number,
    applied: { readonly name: string; readonly checksum: string | null },
    shipped: { readonly name: string; readonly checksum: string } | null,
  ) {
    const what =
      shipped === null
        ? `it records ${applied.name}, which this version does not ship`
        : applied.name !== shipped.name
          ? `it records ${applied.name}, this version ships ${shipped.name}`
          : `${applied.name} was applied with sha-256 ${applied.checksum ?? '(none)'}, this version ships ${shipped.checksum}`;
    super(`queue schema ${schema}, migration ${version}: ${what}; nothing applied`);
    this.schema = schema;
    this.version = version;
    this.applied = applied;
    this.shipped = shipped;
  }
}

/** An operation that only makes sense inside a transaction (row locks, `mandatory`) ran outside one. */
export class NotInTransaction extends TxKitError {
  /** The failure kind, `'NotInTransaction'`: switch on it. */
  readonly kind = 'NotInTransaction' as const;
  /** What was attempted. */
  readonly operation: string;
  constructor(operation: string) {
    super(`${operation} needs a transaction (in autocommit its locks would end with the statement)`);
    this.operation = operation;
  }
}

/** No client could be checked out of the pool in time (e.g. requiresNew with every client in use). */
export class PoolExhausted extends TxKitError {
  /** The failure kind, `'PoolExhausted'`: switch on it. */
  readonly kind = 'PoolExhausted' as const;
  constructor(detail: string, cause?: unknown) {
    super(`no database client available: ${detail}`, cause);
  }
}

/** A booking overlaps an existing one (EXCLUDE constraint). `conflicting` is the booking in the way. */
export class Overlap<Row = Record<string, unknown>> extends TxKitError {
  /** The failure kind, `'Overlap'`: switch on it. */
  readonly kind = 'Overlap' as const;
  /** The existing booking(s) that overlap the requested range (empty if it could not be read). */
  readonly conflicting: readonly Row[];
  /** The constraint that refused it. */
  readonly constraint: string | undefined;
  constructor(conflicting: readonly Row[], constraint: string | undefined, cause?: unknown) {
    super(`the range overlaps ${conflicting.length || 'an'} existing booking(s)`, cause);
    this.conflicting = conflicting;
    this.constraint = constraint;
  }
}

/** An idempotency key (or single-run) is being processed by another caller right now. */
export class InProgress extends TxKitError {
  /** The failure kind, `'InProgress'`: switch on it. */
  readonly kind = 'InProgress' as const;
  /** The key in progress. */
  readonly key: string;
  constructor(key: string) {
    super(`work for key "${key}" is in progress elsewhere`);
    this.key = key;
  }
}

/** An idempotency key was reused with a different request. */
export class IdempotencyConflict extends TxKitError {
  /** The failure kind, `'IdempotencyConflict'`: switch on it. */
  readonly kind = 'IdempotencyConflict' as const;
  /** The reused key. */
  readonly key: string;
  constructor(key: string) {
    super(`idempotency key "${key}" was already used for a different request`);
    this.key = key;
  }
}

/** The work for this key already ran to success; `result` is what it returned then. */
export class AlreadyDone<R = unknown> extends TxKitError {
  /** The failure kind, `'AlreadyDone'`: switch on it. */
  readonly kind = 'AlreadyDone' as const;
  /** The stored result of the successful run. */
  readonly result: R;
  /** When it completed, if known. */
  readonly completedAt: Date | undefined;
  constructor(result: R, completedAt?: Date) {
    super('this work has already been done');
    this.result = result;
    this.completedAt = completedAt;
  }
}

/** A queue task name that was not registered, or a payload its schema refuses. */
export class UnknownTask extends TxKitError {
  /** The failure kind, `'UnknownTask'`: switch on it. */
  readonly kind = 'UnknownTask' as const;
  /** The task name given. */
  readonly task: string;
  constructor(task: string) {
    super(`unknown task "${task}"`);
    this.task = task;
  }
}

/** A capability {@link Unsupported} can name (the fields of `capabilities()`'s result). */
export type CapabilityName =
  | 'advisoryLocks'
  | 'sessionLocks'
  | 'listenNotify'
  | 'skipLocked'
  | 'btreeGist'
  | 'exclusionConstraints'
  | 'serializable'
  | 'savepoints';

/**
 * The server, or the way the connection reaches it, lacks what an operation needs: `btree_gist` that
 * this role cannot install (Bookings), LISTEN that an engine refuses (the queue worker then polls).
 * `reason` says what was found and what to do. Nothing was changed.
 *
 * @example
 * const r = await rooms.migrate(pool);
 * if (r.isErr() && r.error.kind === 'Unsupported') console.error(r.error.capability, r.error.reason);
 */
export class Unsupported extends TxKitError {
  /** The failure kind, `'Unsupported'`: switch on it. */
  readonly kind = 'Unsupported' as const;
  /** What is missing. */
  readonly capability: CapabilityName;
  /** What was found, and how to get it (an install command, a setting). */
  readonly reason: string;
  constructor(capability: CapabilityName, reason: string, cause?: unknown) {
    super(`${capability} is not available: ${reason}`, cause);
    this.capability = capability;
    this.reason = reason;
  }
}

/** Any other database error, with its SQLSTATE. Not retried. */
export class DbError extends TxKitError {
  /** The failure kind, `'DbError'`: switch on it. */
  readonly kind = 'DbError' as const;
  /** SQLSTATE of the error (e.g. 42P01), or undefined when the driver gave none. */
  readonly code: string | undefined;
  constructor(code: string | undefined, message: string, cause?: unknown) {
    super(`database error${code ? ` ${code}` : ''}: ${message}`, cause);
    this.code = code;
  }
}

/** Every error kind pg-txkit produces for a database failure (what {@link classify} returns). */
export type DatabaseFailure =
  | UniqueViolation
  | ExclusionViolation
  | ForeignKeyViolation
  | CheckViolation
  | NotNullViolation
  | SerializationFailure
  | DeadlockDetected
  | LockNotAvailable
  | StatementTimeout
  | QueryTimeout
  | IdleInTransactionTimeout
  | ConnectionLost
  | ReadOnlyTransaction
  | CommitOutcomeUnknown
  | PoolExhausted
  | DbError;

/** The errors `TxManager.do` itself can return (besides the callback's own `Err` values). */
export type TxError = DatabaseFailure | RetriesExhausted | InvalidOptions | NotInTransaction;

/** Every kind name. */
export type TxKitErrorKind =
  | DatabaseFailure['kind']
  | RetriesExhausted['kind']
  | InvalidOptions['kind']
  | NotInTransaction['kind']
  | ConditionFailed['kind']
  | NotFound['kind']
  | LockBusy['kind']
  | LeaseLost['kind']
  | JobCancelled['kind']
  | ScheduleFailed['kind']
  | MigrationChanged['kind']
  | Overlap['kind']
  | InProgress['kind']
  | IdempotencyConflict['kind']
  | AlreadyDone['kind']
  | UnknownTask['kind']
  | Unsupported['kind'];

/** Is this value one of pg-txkit's errors? (Optionally of a given kind.) */
export function isTxKitError<K extends TxKitErrorKind>(
  value: unknown,
  kind?: K,
): value is TxKitError & { kind: K } {
  return value instanceof TxKitError && (kind === undefined || value.kind === kind);
}
