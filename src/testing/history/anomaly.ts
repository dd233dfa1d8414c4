import type { DependencyKind } from './dependency-graph.js';
import type { HistoryKey, HistoryValue } from './history.js';

/**
 * The anomalies {@link checkHistory} names (Adya's, as Elle reports them):
 * - `G0` write cycle: transactions overwrote each other's writes in both orders (ww only);
 * - `G1a` aborted read: a committed transaction read a write of a transaction that aborted;
 * - `G1b` intermediate read: it read a version its writer overwrote before committing;
 * - `G1c` circular information flow: a cycle of ww and wr dependencies (at least one wr);
 * - `G-single` read skew: a cycle with exactly one anti-dependency (rw);
 * - `G-nonadjacent`: a cycle with two or more anti-dependencies, no two of them adjacent (forbidden
 *   by snapshot isolation, which allows only cycles where two anti-dependencies follow each other);
 * - `G2-item` write skew and kin: a cycle with two or more anti-dependencies (some adjacent);
 * - `lost-update`: two committed transactions read the same version of a key and both wrote it;
 * - `internal`: a transaction's own reads disagree with its own writes or with its earlier read;
 * - `dirty-update`: a committed write came after an aborted one in a key's version order;
 * - `garbage-read`: a read returned a value nobody wrote;
 * - `future-read`: a read returned a value its own transaction wrote only later;
 * - `duplicate-elements`: a list read holds the same appended value twice;
 * - `incompatible-order`: two reads of a list disagree on the order of its elements (neither is a
 *   prefix of the other);
 * - a cycle type with `-realtime` (model `'strict-serializable'`): the cycle needs a real-time edge
 *   (a transaction ordered before one that finished before it began);
 * - a cycle type with `-process` (option `processOrder`): the cycle needs session order (a
 *   transaction ordered before one its own client had run earlier).
 */
export type AnomalyType =
  | 'G0'
  | 'G1a'
  | 'G1b'
  | 'G1c'
  | 'G-single'
  | 'G-nonadjacent'
  | 'G2-item'
  | 'lost-update'
  | 'internal'
  | 'dirty-update'
  | 'garbage-read'
  | 'future-read'
  | 'duplicate-elements'
  | 'incompatible-order'
  | 'G0-realtime'
  | 'G1c-realtime'
  | 'G-single-realtime'
  | 'G-nonadjacent-realtime'
  | 'G2-item-realtime'
  | 'G0-process'
  | 'G1c-process'
  | 'G-single-process'
  | 'G-nonadjacent-process'
  | 'G2-item-process';

/** One dependency of a cycle: `from` must precede `to` in any serial order, because of `kind`. */
export interface DependencyStep {
  /** The transaction that must come first: its 0-based index in the history (`T<from>` in explanations). */
  readonly from: number;
  /** The transaction that must come after it: its 0-based index in the history. */
  readonly to: number;
  /** Why `from` precedes `to`: `ww`, `wr` or `rw` on `key`, or `realtime` or `process` order. */
  readonly kind: DependencyKind;
  /** The key whose versions make the dependency; absent for `realtime` and `process` steps. */
  readonly key?: HistoryKey;
  /** The version `from` wrote or read (`null`: the initial state). */
  readonly value?: HistoryValue | readonly HistoryValue[] | null;
  /** The version `to` wrote or read. */
  readonly next?: HistoryValue | readonly HistoryValue[] | null;
}

/**
 * An anomaly found: its type, the transactions involved (indexes into the history, in cycle order
 * for a cycle), the cycle that proves it (for G0, G1c, G-single, G2-item), the key concerned (for
 * the others) and a sentence-by-sentence explanation.
 */
export interface Anomaly {
  /** Which anomaly (see {@link AnomalyType}). */
  readonly type: AnomalyType;
  /** The transactions involved, as 0-based indexes into the history; for a cycle, in cycle order. */
  readonly transactions: readonly number[];
  /** The dependencies that close the cycle, in order; present for the cycle types only. */
  readonly cycle?: readonly DependencyStep[];
  /** The key concerned; absent for the cycle types (each step of `cycle` names its own key). */
  readonly key?: HistoryKey;
  /** What happened, in plain sentences naming the transactions `T<index>`, keys and values. */
  readonly explanation: string;
}
