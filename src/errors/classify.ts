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
