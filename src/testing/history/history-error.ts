/** What is wrong with a history given to {@link checkHistory}. */
export type HistoryErrorReason =
  | 'not-a-history'
  | 'unknown-workload'
  | 'unknown-outcome'
  | 'unknown-operation'
  | 'no-key'
  | 'bad-value'
  | 'bad-read'
  | 'duplicate-write'
  | 'bad-clock'
  | 'no-process'
  | 'bad-options';

/**
 * A history the checker cannot read, with the position of the problem (`transaction` and
 * `operation`, 0-based; `-1` when not about one) and, in the message, what to do. Nothing is checked
 * when it is thrown: a checker that guessed would prove nothing.
 *
 * @example
 * try {
 *   checkHistory({ workload: 'list-append', transactions: [{ outcome: 'done', ops: [] }] } as never);
 * } catch (error) {
 *   if (error instanceof HistoryError) console.log(error.reason, error.transaction); // 'unknown-outcome' 0
 * }
 */
export class HistoryError extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'HistoryError';
  /** Discriminant, `'HistoryError'`. */
  readonly kind = 'HistoryError' as const;
  /** Why. */
  readonly reason: HistoryErrorReason;
  /** 0-based index of the transaction concerned, `-1` when not about one. */
  readonly transaction: number;
  /** 0-based index of the operation in that transaction, `-1` when not about one. */
  readonly operation: number;
  constructor(reason: HistoryErrorReason, message: string, transaction = -1, operation = -1) {
    const where =
      transaction < 0
        ? ''
        : operation < 0
          ? `transaction ${transaction}: `
          : `transaction ${transaction}, operation ${operation}: `;
    super(`${where}${message}`);
    this.reason = reason;
    this.transaction = transaction;
    this.operation = operation;
  }
}
