/** Why a {@link TxUsageError} was thrown. */
export type TxUsageReason =
  /** `strict: true` and the pool was queried directly while a transaction is active in this async context. */
  | 'pool-in-transaction'
  /** A `Tx` was used after its transaction ended (it leaked out of the callback). */
  | 'transaction-closed';

/**
 * A programming error in how the transaction manager is used (a defect, so it is thrown, never
 * returned as an `Err`): querying the pool directly inside a transaction under `strict: true`, or using
 * a `Tx` after its callback returned.
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
  override get name(): string {
    return 'TxUsageError';
  }
}
