import { type DependencyGraph, REALTIME } from './dependency-graph.js';
import type { HistoryTransaction } from './history.js';
import { HistoryError } from './history-error.js';

/**
 * Adds real-time order to `graph`: `a → b` when committed `a` ended before `b` (committed or of
 * unknown outcome) began, transitively reduced as Elle does: a sweep over start and end events keeps
 * the frontier of transactions that ended and are not yet known to precede another that ended; a
 * start gets an edge from each of them. The frontier stays as small as the concurrency.
 */
export function addRealtimeEdges(
  transactions: readonly HistoryTransaction<unknown>[],
  graph: DependencyGraph,
): void {
  // events: [time, 0 = start | 1 = end, txn]; at one time, starts go first (no order between them)
  const events: [number, number, number][] = [];
  for (let t = 0; t < transactions.length; t++) {
    const txn = transactions[t]!;
    if (txn.outcome === 'abort') continue;
    if (txn.start === undefined || (txn.outcome === 'commit' && txn.end === undefined)) {
      throw new HistoryError(
        'bad-clock',
        "the 'strict-serializable' model needs start (and end, once committed) on every transaction that did not abort: record them (the recorders do) or check another model",
        t,
      );
    }
    events.push([txn.start, 0, t]);
    if (txn.outcome === 'commit') events.push([txn.end!, 1, t]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const frontier = new Set<number>();
  const before = new Map<number, number[]>();
  for (const [, type, t] of events) {
    if (type === 0) {
      const preceding = [...frontier];
      for (const p of preceding) graph.add(p, t, REALTIME, {});
      before.set(t, preceding);
    } else {
      for (const p of before.get(t) ?? []) frontier.delete(p);
      before.delete(t);
      frontier.add(t);
    }
  }
}
