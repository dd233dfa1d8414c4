/**
 * The shape of a recorded history: what concurrent transactions did, as the checker reads it
 * ({@link checkHistory}). Two workloads, as in Jepsen's Elle:
 * - `'list-append'`: each key holds a list; a transaction appends values to keys and reads whole
 *   lists. Every read shows the order of the appends it saw, so the checker recovers each key's
 *   version order from the reads themselves.
 * - `'rw-register'`: each key holds one value; a transaction writes and reads values. Reads show
 *   less (one version), so fewer dependencies can be inferred (see `checkHistory`'s notes).
 *
 * Values written to one key must be unique within the history (an append of 3 to `x` happens once):
 * that is what lets a read name the transaction that wrote what it saw.
 */

/** A key of the workload (a row id, a name). */
export type HistoryKey = string | number;
/** A value written to a key. Unique per key within a history. */
export type HistoryValue = string | number;

/**
 * How a transaction ended, as the client saw it: `'commit'` (COMMIT returned), `'abort'` (rolled
 * back, or an error before COMMIT), `'unknown'` (the connection was lost while COMMIT was in flight:
 * it may or may not have committed).
 */
export type TxOutcome = 'commit' | 'abort' | 'unknown';

/** The outcomes a history may carry. */
export const TX_OUTCOMES = ['commit', 'abort', 'unknown'] as const satisfies readonly TxOutcome[];

/** An append of `value` to the list at `key`. */
export interface AppendOp {
  /** The operation: `'append'`. */
  readonly f: 'append';
  /** The list appended to. */
  readonly key: HistoryKey;
  /** The element appended: unique for this key within the history. */
  readonly value: HistoryValue;
}

/** A read of the list at `key`: its elements in order (`[]` or `null`: the key had no list yet). */
export interface ListReadOp {
  /** The operation: `'read'`. */
  readonly f: 'read';
  /** The list read. */
  readonly key: HistoryKey;
  /** The elements the read returned, in list order; `[]` or `null` when the key had no list yet. */
  readonly value: readonly HistoryValue[] | null;
}

/** A write of `value` to the register at `key`. */
export interface WriteOp {
  /** The operation: `'write'`. */
  readonly f: 'write';
  /** The register written. */
  readonly key: HistoryKey;
  /** The value written: unique for this key within the history. */
  readonly value: HistoryValue;
}

/** A read of the register at `key` (`null`: the key had no value yet, its initial state). */
export interface RegisterReadOp {
  /** The operation: `'read'`. */
  readonly f: 'read';
  /** The register read. */
  readonly key: HistoryKey;
  /** The value the read returned; `null` when the key had no value yet. */
  readonly value: HistoryValue | null;
}

/** An operation of a list-append transaction. */
export type ListAppendOp = AppendOp | ListReadOp;
/** An operation of a read-write-register transaction. */
export type RegisterOp = WriteOp | RegisterReadOp;

/**
 * One transaction: its operations in the order it ran them, and how it ended. `process` names the
 * client that ran it (a client runs one transaction at a time); `start` and `end` are positions on
 * one clock shared by all clients (the recorders use a counter), needed only by the
 * `'strict-serializable'` model (real-time order: `a.end < b.start` means `a` finished before `b`
 * began).
 */
export interface HistoryTransaction<Op> {
  /** How it ended, as its client saw it. */
  readonly outcome: TxOutcome;
  /** Its operations, in the order it ran them (a read records what the statement returned). */
  readonly ops: readonly Op[];
  /**
   * The client that ran it. Required by the `processOrder` option on every transaction that did not
   * abort; otherwise it may be absent.
   */
  readonly process?: string | number;
  /**
   * When it began (just before BEGIN was sent), on a clock shared by all clients: any finite numbers
   * (the recorders count ticks; not milliseconds). Required by the `'strict-serializable'` model on
   * every transaction that did not abort; otherwise it may be absent.
   */
  readonly start?: number;
  /**
   * When its client learned the outcome, on the same clock (not before `start`). Required by
   * `'strict-serializable'` on committed transactions; absent when the client never saw it end.
   */
  readonly end?: number;
}

/** A list-append history. */
export interface ListAppendHistory {
  /** The workload: `'list-append'`. */
  readonly workload: 'list-append';
  /**
   * The transactions; anomalies name them by their index here (`T<index>`). With `processOrder` and
   * no `start`, a client's transactions are taken in this order.
   */
  readonly transactions: readonly HistoryTransaction<ListAppendOp>[];
}

/** A read-write-register history. */
export interface RegisterHistory {
  /** The workload: `'rw-register'`. */
  readonly workload: 'rw-register';
  /**
   * The transactions; anomalies name them by their index here (`T<index>`). With `processOrder` and
   * no `start`, a client's transactions are taken in this order.
   */
  readonly transactions: readonly HistoryTransaction<RegisterOp>[];
}

/** A history of either workload. */
export type History = ListAppendHistory | RegisterHistory;

/** The workloads a history may record. */
export const WORKLOADS = ['list-append', 'rw-register'] as const satisfies readonly History['workload'][];
