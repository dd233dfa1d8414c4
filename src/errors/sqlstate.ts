/**
 * The SQLSTATE catalogue: every code pg-txkit gives a meaning to, in one table.
 *
 * `kind` is the error class {@link classify} turns it into. Whether a kind is retried is decided in
 * one other table, by kind: `RETRY_TABLE` (src/tx/retryable.ts). Everything not listed becomes
 * `DbError` with its code.
 */
export const SQLSTATE = [
  // --- Concurrency conflicts: the transaction lost a race; re-running it from BEGIN is the fix. ---
  // 40001 serialization_failure: repeatable read / serializable saw a concurrent change (also on COMMIT).
  { code: '40001', name: 'serialization_failure', kind: 'SerializationFailure' },
  // 40P01 deadlock_detected: this transaction was chosen as the deadlock victim; the other went on.
  { code: '40P01', name: 'deadlock_detected', kind: 'DeadlockDetected' },
  // 55P03 lock_not_available: NOWAIT found the row locked, or lock_timeout expired while waiting.
  { code: '55P03', name: 'lock_not_available', kind: 'LockNotAvailable' },
  // --- Outcome unknown: the server cannot say whether the transaction committed. Never retried blindly. ---
  // 40003 statement_completion_unknown.
  { code: '40003', name: 'statement_completion_unknown', kind: 'CommitOutcomeUnknown' },
  // --- Integrity: the database refused the data; a domain answer, never retried. ---
  { code: '23505', name: 'unique_violation', kind: 'UniqueViolation' },
  { code: '23P01', name: 'exclusion_violation', kind: 'ExclusionViolation' },
  { code: '23503', name: 'foreign_key_violation', kind: 'ForeignKeyViolation' },
  { code: '23514', name: 'check_violation', kind: 'CheckViolation' },
  { code: '23502', name: 'not_null_violation', kind: 'NotNullViolation' },
  // --- Timeouts and cancels. ---
  // 57014 query_canceled: statement_timeout or pg_cancel_backend. Not retried: the work may be too slow.
  { code: '57014', name: 'query_canceled', kind: 'StatementTimeout' },
  // 25P03 idle_in_transaction_session_timeout: the server ended the session; the transaction is gone.
  // Its own kind: caused by a slow step inside the transaction, which a retry would repeat.
  { code: '25P03', name: 'idle_in_transaction_session_timeout', kind: 'IdleInTransactionTimeout' },
  // --- The server is read only (a hot standby, a demoted primary: where a stale DNS answer points after a
  // failover), or the transaction was started READ ONLY. The write did nothing; a read-write transaction
  // is retried on a new connection, a readOnly one is not. ---
  { code: '25006', name: 'read_only_sql_transaction', kind: 'ReadOnlyTransaction' },
  // --- The connection or the server went away (ConnectionLost is retried only before COMMIT was sent). ---
  { code: '57P01', name: 'admin_shutdown', kind: 'ConnectionLost' }, // pg_terminate_backend, fast shutdown
  { code: '57P02', name: 'crash_shutdown', kind: 'ConnectionLost' },
  { code: '57P03', name: 'cannot_connect_now', kind: 'ConnectionLost' }, // starting up / shutting down
  { code: '57P05', name: 'idle_session_timeout', kind: 'ConnectionLost' },
  { code: '08000', name: 'connection_exception', kind: 'ConnectionLost' },
  { code: '08003', name: 'connection_does_not_exist', kind: 'ConnectionLost' },
  { code: '08006', name: 'connection_failure', kind: 'ConnectionLost' },
  {
    code: '08001',
    name: 'sqlclient_unable_to_establish_sqlconnection',
    kind: 'ConnectionLost',
  },
  {
    code: '08004',
    name: 'sqlserver_rejected_establishment_of_sqlconnection',
    kind: 'ConnectionLost',
  },
  // 53300 too_many_connections: the server is full; our own pool being full is PoolExhausted.
  { code: '53300', name: 'too_many_connections', kind: 'ConnectionLost' },
] as const;

/** One row of {@link SQLSTATE}. */
export type SqlStateEntry = (typeof SQLSTATE)[number];

const BY_CODE: ReadonlyMap<string, SqlStateEntry> = new Map(SQLSTATE.map((entry) => [entry.code, entry]));

/** The catalogue entry of a SQLSTATE, if pg-txkit gives it a meaning. */
export function sqlState(code: string | undefined): SqlStateEntry | undefined {
  return code === undefined ? undefined : BY_CODE.get(code);
}
