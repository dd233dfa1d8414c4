/** Why a {@link TxUsageError} was thrown. */
export type TxUsageReason =
  /** `strict: true` and the pool was queried directly while a transaction is active in this async context. */
  | 'pool-in-transaction'
  /** A `Tx` was used after its transaction ended (it leaked out of the callback). */
  | 'transaction-closed'
  /** A statement that would end or start the transaction (COMMIT, ROLLBACK, BEGIN …), or break its savepoints, sent through `tx.query`: refused before it is sent. */
  | 'transaction-control'
  /** A scope queried while a concurrent `nested` scope of the same transaction had its SAVEPOINT open. */
  | 'concurrent-scope';

/**
 * A programming error in how the transaction manager is used (a defect, so it is thrown, never
 * returned as an `Err`): querying the pool directly inside a transaction under `strict: true`, using
 * a `Tx` after its callback returned, ending the transaction through `tx.query('COMMIT')`, or running
 * scopes of one transaction concurrently with a `nested` one. The attempt cannot commit after it: it
 * rolls back and `do()` rejects with this error, even if the callback caught it.
 *
 * @example
 * const tm = new TxManager(pool, { strict: true });
 * await tm.doOrThrow(async () => {
 *   await pool.query('SELECT 1'); // throws TxUsageError { reason: 'pool-in-transaction' }
 * });
 */
export class TxUsageError extends Error {
  /** What was misused. */
  readonly reason: TxUsageReason;
  constructor(reason: TxUsageReason, message: string) {
    super(message);
    this.reason = reason;
  }
  /** The class name, for stack traces and logs. */
  override get name(): string {
    return 'TxUsageError';
  }
}
