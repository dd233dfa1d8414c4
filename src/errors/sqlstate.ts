/**
 * The SQLSTATE catalogue: every code pg-txkit gives a meaning to, in one table.
 *
 * `kind` is the error class {@link classify} turns it into; `retryable` says whether the transaction
 * manager retries it by default (the whole transaction, from a fresh BEGIN). Everything not listed
 * becomes `DbError` with its code and is never retried.
 */
export const SQLSTATE = [
  // --- Concurrency conflicts: the transaction lost a race; re-running it from BEGIN is the fix. ---
  // 40001 serialization_failure: repeatable read / serializable saw a concurrent change (also on COMMIT).
  { code: '40001', name: 'serialization_failure', kind: 'SerializationFailure', retryable: true },
  // 40P01 deadlock_detected: this transaction was chosen as the deadlock victim; the other went on.
  { code: '40P01', name: 'deadlock_detected', kind: 'DeadlockDetected', retryable: true },
  // 55P03 lock_not_available: NOWAIT found the row locked, or lock_timeout expired while waiting.
  { code: '55P03', name: 'lock_not_available', kind: 'LockNotAvailable', retryable: true },
  // --- Outcome unknown: the server cannot say whether the transaction committed. Never retried blindly. ---
  // 40003 statement_completion_unknown.
  { code: '40003', name: 'statement_completion_unknown', kind: 'CommitOutcomeUnknown', retryable: false },
  // --- Integrity: the database refused the data; a domain answer, never retried. ---
  { code: '23505', name: 'unique_violation', kind: 'UniqueViolation', retryable: false },
  { code: '23P01', name: 'exclusion_violation', kind: 'ExclusionViolation', retryable: false },
  { code: '23503', name: 'foreign_key_violation', kind: 'ForeignKeyViolation', retryable: false },
  { code: '23514', name: 'check_violation', kind: 'CheckViolation', retryable: false },
  { code: '23502', name: 'not_null_violation', kind: 'NotNullViolation', retryable: false },
  // --- Timeouts and cancels. ---
  // 57014 query_canceled: statement_timeout or pg_cancel_backend. Not retried: the work may be too slow.
  { code: '57014', name: 'query_canceled', kind: 'StatementTimeout', retryable: false },
  // 25P03 idle_in_transaction_session_timeout: the server ended the session; the transaction is gone.
  { code: '25P03', name: 'idle_in_transaction_session_timeout', kind: 'ConnectionLost', retryable: true },
  // --- The connection or the server went away (ConnectionLost is retried only before COMMIT was sent). ---
  { code: '57P01', name: 'admin_shutdown', kind: 'ConnectionLost', retryable: true }, // pg_terminate_backend, fast shutdown
  { code: '57P02', name: 'crash_shutdown', kind: 'ConnectionLost', retryable: true },
  { code: '57P03', name: 'cannot_connect_now', kind: 'ConnectionLost', retryable: true }, // starting up / shutting down
  { code: '57P05', name: 'idle_session_timeout', kind: 'ConnectionLost', retryable: true },
  { code: '08000', name: 'connection_exception', kind: 'ConnectionLost', retryable: true },
  { code: '08003', name: 'connection_does_not_exist', kind: 'ConnectionLost', retryable: true },
  { code: '08006', name: 'connection_failure', kind: 'ConnectionLost', retryable: true },
  {
    code: '08001',
    name: 'sqlclient_unable_to_establish_sqlconnection',
    kind: 'ConnectionLost',
    retryable: true,
  },
  {
    code: '08004',
    name: 'sqlserver_rejected_establishment_of_sqlconnection',
    kind: 'ConnectionLost',
    retryable: true,
  },
  // 53300 too_many_connections: the server is full; our own pool being full is PoolExhausted.
  { code: '53300', name: 'too_many_connections', kind: 'ConnectionLost', retryable: true },
] as const;

/** One row of {@link SQLSTATE}. */
export type SqlStateEntry = (typeof SQLSTATE)[number];

const BY_CODE: ReadonlyMap<string, SqlStateEntry> = new Map(SQLSTATE.map((entry) => [entry.code, entry]));

/** The catalogue entry of a SQLSTATE, if pg-txkit gives it a meaning. */
export function sqlState(code: string | undefined): SqlStateEntry | undefined {
  return code === undefined ? undefined : BY_CODE.get(code);
}
