import type { HistoryTransaction, TxOutcome } from './history.js';

/**
 * One transaction being recorded (see {@link ListAppendRecorder}, {@link RegisterRecorder}): add
 * its operations in the order they ran, then end it with its outcome. Methods chain.
 */
export class RecordedTransaction<Op> {
  readonly #ops: Op[] = [];
  readonly #clock: () => number;
  readonly #process: string | number;
  readonly #start: number;
  #ended: { outcome: TxOutcome; end: number } | undefined;

  constructor(process: string | number, clock: () => number) {
    this.#process = process;
    this.#clock = clock;
    this.#start = clock();
  }

  /** Adds an operation (the recorders' typed methods call this). */
  protected push(op: Op): this {
    if (this.#ended)
      throw new Error(`the transaction of ${String(this.#process)} already ended (${this.#ended.outcome})`);
    this.#ops.push(op);
    return this;
  }

  /** COMMIT returned. */
  commit(): void {
    this.end('commit');
  }

  /** It rolled back, or failed before COMMIT was sent. */
  abort(): void {
    this.end('abort');
  }

  /** The connection was lost while COMMIT was in flight (pg-txkit's `CommitOutcomeUnknown`). */
  unknown(): void {
    this.end('unknown');
  }

  /** Ends it with `outcome`. */
  end(outcome: TxOutcome): void {
    if (this.#ended)
      throw new Error(`the transaction of ${String(this.#process)} already ended (${this.#ended.outcome})`);
    this.#ended = { outcome, end: this.#clock() };
  }

  /** As a history transaction; one still open is `'unknown'` (its client never saw how it ended). */
  toTransaction(): HistoryTransaction<Op> {
    const ops = [...this.#ops];
    return this.#ended
      ? {
          outcome: this.#ended.outcome,
          ops,
          process: this.#process,
          start: this.#start,
          end: this.#ended.end,
        }
      : { outcome: 'unknown', ops, process: this.#process, start: this.#start };
  }
}

/**
 * What the two recorders share: a clock (a counter shared by every transaction, so `start` and `end`
 * give real-time order) and the transactions in the order they began. Not made directly: use
 * {@link ListAppendRecorder} or {@link RegisterRecorder}.
 */
export class HistoryRecorder<Op, T extends RecordedTransaction<Op>> {
  #tick = 0;
  readonly #transactions: T[] = [];
  readonly #create: (process: string | number, clock: () => number) => T;

  constructor(create: (process: string | number, clock: () => number) => T) {
    this.#create = create;
  }

  /**
   * Starts recording a transaction of `process`, the client that runs it (call it just before BEGIN
   * is sent: that tick is its `start`).
   *
   * @example
   * const t = recorder.begin('client-1');
   * t.read('x', null).write('x', 1).commit();
   */
  begin(process: string | number): T {
    const t = this.#create(process, () => this.#tick++);
    this.#transactions.push(t);
    return t;
  }

  /** The transactions recorded so far, in the order they began. */
  protected transactions(): HistoryTransaction<Op>[] {
    return this.#transactions.map((t) => t.toTransaction());
  }
}
