import {
  CheckViolation,
  CommitOutcomeUnknown,
  ConnectionLost,
  type DatabaseFailure,
  DbError,
  DeadlockDetected,
  type DriverErrorFields,
  ExclusionViolation,
  ForeignKeyViolation,
  IdleInTransactionTimeout,
  LockNotAvailable,
  NotNullViolation,
  PoolExhausted,
  QueryTimeout,
  ReadOnlyTransaction,
  SerializationFailure,
  StatementTimeout,
  TxKitError,
  UniqueViolation,
} from './errors.js';
import { sqlState } from './sqlstate.js';

/** Socket-level error codes (Node's `error.code`) that mean the connection is gone. */
const SOCKET_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTCONN',
  'ECONNABORTED',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** Messages node-postgres uses for a connection that broke or was closed (it sets no code on them). */
const CONNECTION_MESSAGES = [
  'Connection terminated',
  'connection terminated',
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
  'terminating connection',
  // pg.Client's connectionTimeoutMillis ran out before the server answered.
  'timeout expired',
];

function fieldsOf(error: object): DriverErrorFields {
  const e = error as Record<string, unknown>;
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
  return {
    code: str(e.code),
    detail: str(e.detail),
    constraint: str(e.constraint),
    table: str(e.table),
    schema: str(e.schema),
    column: str(e.column),
    message: str(e.message),
  };
}

/** pg's message for its client-side `query_timeout` (the server may still be running the statement). */
const QUERY_READ_TIMEOUT = 'Query read timeout';

/**
 * Does `error` have the shape of pg's `DatabaseError` (an ErrorResponse the server sent)? Checked
 * structurally (the user's pg may be another copy or version): a `severity`, a five-character SQLSTATE
 * `code`, and the protocol fields pg always sets on it (`routine`, `length`). A user's own error or a
 * plain object that merely carries `code: '40001'` does not qualify.
 *
 * @example
 * looksLikeDatabaseError(Object.assign(new Error('x'), { code: '40001' })); // false
 */
export function looksLikeDatabaseError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const e = error as Error & { severity?: unknown; code?: unknown; length?: unknown };
  return (
    typeof e.severity === 'string' &&
    typeof e.code === 'string' &&
    /^[0-9A-Z]{5}$/.test(e.code) &&
    typeof e.length === 'number' &&
    'routine' in e
  );
}

/** Does this error mean the connection is gone (socket error, terminated, closed)? */
export function isConnectionError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = fieldsOf(error);
  if (code !== undefined && SOCKET_CODES.has(code)) return true;
  if (code !== undefined && sqlState(code)?.kind === 'ConnectionLost') return true;
  return message !== undefined && CONNECTION_MESSAGES.some((m) => message.includes(m));
}

/**
 * Maps an error thrown by node-postgres (or pg-pool) to pg-txkit's taxonomy.
 *
 * Returns `undefined` for anything that is not a database or connection failure: a TypeError, a
 * bug in the caller's code. Such errors are defects and must propagate unchanged. A value that is
 * already a {@link TxKitError} of a database kind is returned as is.
 *
 * @example
 * try {
 *   await pool.query('INSERT INTO users (email) VALUES ($1)', [email]);
 * } catch (e) {
 *   const failure = classify(e);
 *   if (failure?.kind === 'UniqueViolation') console.log(failure.constraint); // users_email_key
 * }
 */
export function classify(error: unknown): DatabaseFailure | undefined {
  if (error instanceof TxKitError) return isDatabaseFailure(error) ? error : undefined;
  if (typeof error !== 'object' || error === null) return undefined;
  const fields = fieldsOf(error);
  const entry = sqlState(fields.code);
  if (entry) {
    switch (entry.kind) {
      case 'UniqueViolation':
        return new UniqueViolation(fields, error);
      case 'ExclusionViolation':
        return new ExclusionViolation(fields, error);
      case 'ForeignKeyViolation':
        return new ForeignKeyViolation(fields, error);
      case 'CheckViolation':
        return new CheckViolation(fields, error);
      case 'NotNullViolation':
        return new NotNullViolation(fields, error);
      case 'SerializationFailure':
        return new SerializationFailure(error);
      case 'DeadlockDetected':
        return new DeadlockDetected(error);
      case 'LockNotAvailable':
        return new LockNotAvailable(error);
      case 'IdleInTransactionTimeout':
        return new IdleInTransactionTimeout(error);
      case 'StatementTimeout':
        return new StatementTimeout(
          /statement timeout/i.test(fields.message ?? '') ? 'timeout' : 'cancel',
          error,
        );
      case 'CommitOutcomeUnknown':
        return new CommitOutcomeUnknown(error);
      case 'ConnectionLost':
        return new ConnectionLost(fields.code, error);
      case 'ReadOnlyTransaction':
        return new ReadOnlyTransaction(error);
    }
  }
  if (fields.message === QUERY_READ_TIMEOUT) return new QueryTimeout(error);
  if (fields.message?.includes('timeout exceeded when trying to connect')) {
    return new PoolExhausted('timed out waiting for a client from the pool', error);
  }
  if (isConnectionError(error)) return new ConnectionLost(fields.code, error);
  // A server error (it has a 5-character SQLSTATE) that has no special meaning.
  if (fields.code !== undefined && /^[0-9A-Z]{5}$/.test(fields.code) && 'severity' in error) {
    return new DbError(fields.code, fields.message ?? 'unknown error', error);
  }
  return undefined;
}

const DATABASE_KINDS: ReadonlySet<string> = new Set([
  'UniqueViolation',
  'ExclusionViolation',
  'ForeignKeyViolation',
  'CheckViolation',
  'NotNullViolation',
  'SerializationFailure',
  'DeadlockDetected',
  'LockNotAvailable',
  'StatementTimeout',
  'QueryTimeout',
  'IdleInTransactionTimeout',
  'ConnectionLost',
  'ReadOnlyTransaction',
  'CommitOutcomeUnknown',
  'PoolExhausted',
  'DbError',
] satisfies DatabaseFailure['kind'][]);

function isDatabaseFailure(error: TxKitError): error is DatabaseFailure {
  return DATABASE_KINDS.has(error.kind);
}

/** How many `cause` links {@link classifyOrRethrow} follows from a thrown error to one the driver raised. */
const CAUSE_DEPTH = 8;

/**
 * What {@link classifyOrRethrow} takes for a database failure, and what it does with anything else.
 * Every rule is optional; each is one of the deliberate differences between its callers.
 */
export interface ClassifyRules<E> {
  /**
   * The errors pg raised for the queries in question, told by identity (the transaction's rule, for an
   * error that passed through a user's callback). Given, only these are database failures: pg-txkit's
   * own database failures, pg's `DatabaseError` (by {@link looksLikeDatabaseError}), and an error of
   * this set — also when a query builder wrapped it: the `cause` chain is followed (at most 8 links, a
   * cycle stops it). A socket error the callback's HTTP client raised, a plain object with a SQLSTATE-like
   * `code`, a wrapper around another connection's error are not.
   *
   * Left out: the error came straight from the driver (a query's or a `connect()`'s rejection), and
   * whatever {@link classify} recognises is a database failure (a socket error, pg's "Connection
   * terminated", pg-pool's connect timeout …).
   */
  readonly raisedByDriver?: { has(error: object): boolean } | undefined;
  /**
   * With `raisedByDriver`: the failure an error that is none of these stands for, when one does (an
   * object that is not pg-txkit's own, e.g. a builder's error that REPLACES pg's without a `cause`, when
   * the transaction cannot commit because of the last driver error it saw). `undefined`: none.
   */
  readonly replacing?: (() => DatabaseFailure | undefined) | undefined;
  /**
   * What to answer, as a value, with an error that is not a database failure. Left out, that error is
   * rethrown unchanged (a defect must propagate).
   */
  readonly otherwise?: ((error: unknown) => E) | undefined;
}

/**
 * THE classify-or-rethrow: the {@link DatabaseFailure} `error` stands for, or — for anything else —
 * `rules.otherwise(error)`, or, without `otherwise`, `error` itself rethrown unchanged. Only the
 * driver's errors are database errors: see {@link ClassifyRules} for what counts as the driver's.
 *
 * @example
 * try {
 *   await pool.query('INSERT INTO users (email) VALUES ($1)', [email]);
 * } catch (e) {
 *   return err(classifyOrRethrow(e)); // a UniqueViolation …; a TypeError rethrown as it was
 * }
 */
export function classifyOrRethrow(error: unknown): DatabaseFailure;
export function classifyOrRethrow<E = never>(error: unknown, rules: ClassifyRules<E>): DatabaseFailure | E;
export function classifyOrRethrow<E>(error: unknown, rules: ClassifyRules<E> = {}): DatabaseFailure | E {
  const failure =
    rules.raisedByDriver === undefined
      ? classify(error)
      : driversFailure(error, rules.raisedByDriver, rules.replacing);
  if (failure !== undefined) return failure;
  if (rules.otherwise === undefined) throw error;
  return rules.otherwise(error);
}

/** {@link ClassifyRules.raisedByDriver}'s rule: the failure of an error that passed through a callback. */
function driversFailure(
  error: unknown,
  raisedByDriver: { has(error: object): boolean },
  replacing: (() => DatabaseFailure | undefined) | undefined,
): DatabaseFailure | undefined {
  // pg-txkit's own errors decide by their kind alone; a thrown non-object is a user's value.
  if (error instanceof TxKitError) return classify(error);
  if (typeof error !== 'object' || error === null) return undefined;
  if (looksLikeDatabaseError(error)) return classify(error);
  const seen = new Set<object>();
  let link: unknown = error;
  for (let depth = 0; depth <= CAUSE_DEPTH && typeof link === 'object' && link !== null; depth++) {
    if (seen.has(link)) break;
    seen.add(link);
    if (raisedByDriver.has(link)) return classify(link);
    link = (link as { cause?: unknown }).cause;
  }
  return replacing?.();
}
