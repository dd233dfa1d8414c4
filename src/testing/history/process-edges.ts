import { type DependencyGraph, PROCESS } from './dependency-graph.js';
import type { HistoryTransaction } from './history.js';
import { HistoryError } from './history-error.js';

/**
 * Adds session order to `graph`: for each client (`process`), an edge from each of its committed
 * transactions to its next one that did not abort (a client runs one transaction at a time, so what
 * it committed precedes what it ran next). Transactions of a client are ordered by `start` when
 * every one has it, else by their position in the history.
 */
export function addProcessEdges(
  transactions: readonly HistoryTransaction<unknown>[],
  graph: DependencyGraph,
): void {
  const byProcess = new Map<string | number, number[]>();
  for (let t = 0; t < transactions.length; t++) {
    const txn = transactions[t]!;
    if (txn.outcome === 'abort') continue;
    if (txn.process === undefined) {
      throw new HistoryError(
        'no-process',
        "processOrder needs the client (process) of every transaction that did not abort: record it (the recorders' begin(process) does) or leave processOrder off",
        t,
      );
    }
    const list = byProcess.get(txn.process);
    if (list) list.push(t);
    else byProcess.set(txn.process, [t]);
  }
  for (const list of byProcess.values()) {
    const clocked = list.every((t) => transactions[t]!.start !== undefined);
    if (clocked) list.sort((a, b) => transactions[a]!.start! - transactions[b]!.start! || a - b);
    for (let i = 0; i + 1 < list.length; i++) {
      const from = list[i]!;
      if (transactions[from]!.outcome === 'commit') graph.add(from, list[i + 1]!, PROCESS, {});
    }
  }
}
