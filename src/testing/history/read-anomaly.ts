import type { Anomaly } from './anomaly.js';
import { show, tx } from './explain.js';
import type { HistoryKey, HistoryValue, TxOutcome } from './history.js';
import type { WriteSite } from './validate-history.js';

/**
 * What one committed read of one written value shows by itself, in both workloads: a value nobody
 * wrote (garbage-read), a write of a transaction that aborted (G1a), or — when the read ends at that
 * value — a version its writer overwrote before it ended (G1b, intermediate read); a read of the
 * reader's own write that comes later in the same transaction (future-read). A read of its own
 * earlier write shows nothing here.
 *
 * @example
 * readAnomaly({ reader: 2, opIndex: 0, key: 'x', read: [1], value: 1, site, last: true, outcomeOf }); // { type: 'G1a', … }
 */
export function readAnomaly(read: {
  readonly reader: number;
  /** The read's position among the reader's operations. */
  readonly opIndex: number;
  readonly key: HistoryKey;
  /** What the read returned (the list, or the register's value), for the explanation. */
  readonly read: HistoryValue | readonly HistoryValue[];
  /** The written value it saw. */
  readonly value: HistoryValue;
  readonly site: WriteSite | undefined;
  /** The read ends at this value (a register read always does). */
  readonly last: boolean;
  readonly outcomeOf: (t: number) => TxOutcome;
}): Anomaly | undefined {
  const { reader, key, site, value } = read;
  const saw = `${tx(reader)} read ${show(key)} = ${show(read.read)}`;
  if (!site) {
    return {
      type: 'garbage-read',
      key,
      transactions: [reader],
      explanation: `${saw}, but no transaction wrote ${show(value)} to ${show(key)}.`,
    };
  }
  if (site.txn === reader) {
    if (site.op < read.opIndex) return undefined;
    return {
      type: 'future-read',
      key,
      transactions: [reader],
      explanation: `${saw}, which holds ${show(value)}, a value it wrote only later (operation ${site.op}).`,
    };
  }
  if (read.outcomeOf(site.txn) === 'abort') {
    return {
      type: 'G1a',
      key,
      transactions: [site.txn, reader],
      explanation: `${saw}, which holds ${show(value)}, written by ${tx(site.txn)}, which aborted.`,
    };
  }
  if (read.last && !site.final) {
    return {
      type: 'G1b',
      key,
      transactions: [site.txn, reader],
      explanation: `${saw}, ending at ${show(value)}, an intermediate state: ${tx(site.txn)} wrote ${show(key)} again before it ended.`,
    };
  }
  return undefined;
}
