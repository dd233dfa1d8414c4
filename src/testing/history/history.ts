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
  readonly f: 'append';
  readonly key: HistoryKey;
  readonly value: HistoryValue;
}

/** A read of the list at `key`: its elements in order (`[]` or `null`: the key had no list yet). */
export interface ListReadOp {
  readonly f: 'read';
  readonly key: HistoryKey;
  readonly value: readonly HistoryValue[] | null;
}

/** A write of `value` to the register at `key`. */
export interface WriteOp {
  readonly f: 'write';
  readonly key: HistoryKey;
  readonly value: HistoryValue;
}

/** A read of the register at `key` (`null`: the key had no value yet, its initial state). */
export interface RegisterReadOp {
  readonly f: 'read';
  readonly key: HistoryKey;
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
  readonly outcome: TxOutcome;
  readonly ops: readonly Op[];
  readonly process?: string | number;
  readonly start?: number;
  readonly end?: number;
}

/** A list-append history. */
export interface ListAppendHistory {
  readonly workload: 'list-append';
  readonly transactions: readonly HistoryTransaction<ListAppendOp>[];
}

/** A read-write-register history. */
export interface RegisterHistory {
  readonly workload: 'rw-register';
  readonly transactions: readonly HistoryTransaction<RegisterOp>[];
}

/** A history of either workload. */
export type History = ListAppendHistory | RegisterHistory;

/** The workloads a history may record. */
export const WORKLOADS = ['list-append', 'rw-register'] as const satisfies readonly History['workload'][];
