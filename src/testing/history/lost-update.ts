import type { Anomaly } from './anomaly.js';
import { show, tx } from './explain.js';
import type { HistoryKey, HistoryTransaction, HistoryValue } from './history.js';

type AnyOp = {
  readonly f: string;
  readonly key: HistoryKey;
  readonly value: HistoryValue | readonly HistoryValue[] | null;
};

/**
 * Lost updates, found directly as Elle does (linear time): committed transactions that read the same
 * version of a key (their first read of it, before writing it) and then wrote that key. Whatever
 * order they committed in, one update was made without seeing the other.
 */
export function lostUpdates(transactions: readonly HistoryTransaction<AnyOp>[]): Anomaly[] {
  // key → version read (as text) → transactions that read it and then wrote the key
  const collisions = new Map<HistoryKey, Map<string, { value: AnyOp['value']; txns: number[] }>>();
  for (let t = 0; t < transactions.length; t++) {
    const txn = transactions[t]!;
    if (txn.outcome !== 'commit') continue;
    const read = new Map<HistoryKey, AnyOp['value']>();
    const wrote = new Set<HistoryKey>();
    for (const op of txn.ops) {
      if (op.f === 'read') {
        if (!read.has(op.key) && !wrote.has(op.key)) read.set(op.key, op.value);
        continue;
      }
      if (wrote.has(op.key)) continue;
      wrote.add(op.key);
      if (!read.has(op.key)) continue;
      const value = read.get(op.key) ?? null;
      const text = JSON.stringify(Array.isArray(value) && value.length === 0 ? null : value);
      let byValue = collisions.get(op.key);
      if (!byValue) {
        byValue = new Map();
        collisions.set(op.key, byValue);
      }
      const entry = byValue.get(text);
      if (entry) entry.txns.push(t);
      else byValue.set(text, { value, txns: [t] });
    }
  }
  const found: Anomaly[] = [];
  for (const [key, byValue] of collisions) {
    for (const { value, txns } of byValue.values()) {
      if (txns.length < 2) continue;
      found.push({
        type: 'lost-update',
        key,
        transactions: txns,
        explanation: `${txns.map(tx).join(', ')} all read ${show(key)} = ${show(value)} and then wrote ${show(key)}, and all committed: each update was made without seeing the others, so all but the last are lost.`,
      });
    }
  }
  return found;
}
