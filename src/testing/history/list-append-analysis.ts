import type { Anomaly } from './anomaly.js';
import { type DependencyGraph, RW, WR, WW } from './dependency-graph.js';
import { show, tx } from './explain.js';
import type { HistoryKey, HistoryValue, ListAppendHistory, TxOutcome } from './history.js';
import { readAnomaly } from './read-anomaly.js';
import type { WriterIndex, WriteSite } from './validate-history.js';

/** A committed transaction's read of a key before it appended to it: what it saw of the world. */
interface Observation {
  readonly txn: number;
  readonly values: readonly HistoryValue[];
}

function isPrefix(short: readonly HistoryValue[], long: readonly HistoryValue[]): boolean {
  if (short.length > long.length) return false;
  for (let i = 0; i < short.length; i++) if (short[i] !== long[i]) return false;
  return true;
}

/**
 * Infers the dependencies of a list-append history into `graph` and returns the anomalies seen
 * directly in its reads. Each key's version order is its longest committed read (every other read
 * must be a prefix of it); from it:
 * - ww: the writer of each element → the writer of the next; the writer of the last observed element
 *   → every append never observed (it came later);
 * - wr: the writer of a read's last element → the reader;
 * - rw: a reader → the writer of the element after its read's last (or → each unobserved append when
 *   it read the whole observed list).
 * Aborted transactions are left out of the graph; transactions of unknown outcome take part as
 * writers (a read shows whether they committed) but not as readers.
 */
export function analyzeListAppend(
  history: ListAppendHistory,
  writers: WriterIndex,
  graph: DependencyGraph,
): Anomaly[] {
  const anomalies: Anomaly[] = [];
  const txns = history.transactions;
  const observations = new Map<HistoryKey, Observation[]>();

  for (let t = 0; t < txns.length; t++) {
    const txn = txns[t]!;
    if (txn.outcome !== 'commit') continue;
    const own = new Map<HistoryKey, HistoryValue[]>();
    const firstRead = new Map<HistoryKey, readonly HistoryValue[]>();
    for (const [opIndex, op] of txn.ops.entries()) {
      if (op.f === 'append') {
        const mine = own.get(op.key);
        if (mine) mine.push(op.value);
        else own.set(op.key, [op.value]);
        continue;
      }
      const values = op.value ?? [];
      checkElements(t, opIndex, op.key, values, writers, (w) => txns[w]!.outcome, anomalies);
      const mine = own.get(op.key);
      const earlier = firstRead.get(op.key);
      if (mine || earlier) {
        // a later read in the same transaction: its snapshot (the first read) plus its own appends
        const expected = earlier ? [...earlier, ...(mine ?? [])] : undefined;
        const ok = expected
          ? expected.length === values.length && isPrefix(expected, values)
          : mine !== undefined && isPrefix(mine, values.slice(values.length - mine.length));
        if (!ok) {
          anomalies.push({
            type: 'internal',
            key: op.key,
            transactions: [t],
            explanation: `${tx(t)} read ${show(op.key)} = ${show(values)}, but expected ${expected ? show(expected) : `a list ending in ${show(mine ?? [])}`} from its own earlier read and appends.`,
          });
        }
        continue;
      }
      firstRead.set(op.key, values);
      const list = observations.get(op.key);
      if (list) list.push({ txn: t, values });
      else observations.set(op.key, [{ txn: t, values }]);
    }
  }

  const live = (site: WriteSite | undefined): site is WriteSite =>
    site !== undefined && txns[site.txn]!.outcome !== 'abort';

  for (const [key, byValue] of writers) {
    const reads = observations.get(key) ?? [];
    let longest: readonly HistoryValue[] = [];
    for (const r of reads) if (r.values.length > longest.length) longest = r.values;
    const compatible: Observation[] = [];
    for (const r of reads) {
      if (isPrefix(r.values, longest)) compatible.push(r);
      else {
        const owner = reads.find((o) => o.values === longest)!;
        anomalies.push({
          type: 'incompatible-order',
          key,
          transactions: [r.txn, owner.txn],
          explanation: `${tx(r.txn)} read ${show(key)} = ${show(r.values)} and ${tx(owner.txn)} read ${show(longest)}: neither is a prefix of the other, so the appends to ${show(key)} have no single order.`,
        });
      }
    }
    const dirty = dirtyUpdate(key, longest, byValue, (t) => txns[t]!.outcome);
    if (dirty) anomalies.push(dirty);
    // the version order: the longest read, each element once
    const order: WriteSite[] = [];
    const orderValues: HistoryValue[] = [];
    const seen = new Set<HistoryValue>();
    for (const v of longest) {
      if (seen.has(v)) continue;
      seen.add(v);
      const site = byValue.get(v);
      if (!live(site)) continue;
      order.push(site);
      orderValues.push(v);
    }
    for (let i = 0; i + 1 < order.length; i++) {
      graph.add(order[i]!.txn, order[i + 1]!.txn, WW, {
        key,
        value: orderValues[i]!,
        next: orderValues[i + 1]!,
      });
    }
    const unobserved: [HistoryValue, WriteSite][] = [];
    for (const [v, site] of byValue) if (!seen.has(v) && live(site)) unobserved.push([v, site]);
    const lastSite = order[order.length - 1];
    if (lastSite) {
      const lastValue = orderValues[orderValues.length - 1]!;
      for (const [v, site] of unobserved)
        graph.add(lastSite.txn, site.txn, WW, { key, value: lastValue, next: v });
    }
    const position = new Map<HistoryValue, number>();
    for (let i = 0; i < orderValues.length; i++) position.set(orderValues[i]!, i);
    for (const r of compatible) {
      const n = r.values.length;
      if (n > 0) {
        const lastRead = r.values[n - 1]!;
        const writer = byValue.get(lastRead);
        if (live(writer)) graph.add(writer.txn, r.txn, WR, { key, value: lastRead, next: r.values });
      }
      // the next version after what it read: where its read ends in the order
      const at = n === 0 ? 0 : (position.get(r.values[n - 1]!) ?? -1) + 1;
      if (at <= 0 && n > 0) continue;
      const next = order[at];
      if (next) graph.add(r.txn, next.txn, RW, { key, value: r.values, next: orderValues[at]! });
      else
        for (const [v, site] of unobserved) graph.add(r.txn, site.txn, RW, { key, value: r.values, next: v });
    }
  }
  return anomalies;
}

/**
 * Dirty update, as Elle finds it: in a key's version order, an element an aborted transaction
 * appended followed by one a committed transaction appended (elements of unknown outcome in between
 * are carried along): the committed write was built on a state that never existed.
 */
function dirtyUpdate(
  key: HistoryKey,
  versions: readonly HistoryValue[],
  byValue: ReadonlyMap<HistoryValue, WriteSite>,
  outcomeOf: (t: number) => TxOutcome,
): Anomaly | undefined {
  let previous: { txn: number; outcome: TxOutcome } | undefined;
  let span: HistoryValue[] = [];
  for (const v of versions) {
    const site = byValue.get(v);
    if (!site) continue;
    const outcome = outcomeOf(site.txn);
    if (outcome === 'unknown' || (outcome === 'abort' && previous?.outcome === 'abort')) {
      span.push(v);
      continue;
    }
    if (outcome === 'commit' && previous?.outcome === 'abort') {
      const values = [...span, v];
      return {
        type: 'dirty-update',
        key,
        transactions: [previous.txn, site.txn],
        explanation: `${show(key)} = ${show(values)}: ${tx(previous.txn)} appended ${show(values[0])} and aborted, yet ${tx(site.txn)} committed ${show(v)} after it.`,
      };
    }
    previous = { txn: site.txn, outcome };
    span = [v];
  }
  return undefined;
}

/** The anomalies a committed read shows by itself: values nobody wrote, aborted or intermediate writes, duplicates. */
function checkElements(
  reader: number,
  opIndex: number,
  key: HistoryKey,
  values: readonly HistoryValue[],
  writers: WriterIndex,
  outcomeOf: (t: number) => TxOutcome,
  anomalies: Anomaly[],
): void {
  const byValue = writers.get(key);
  const seen = new Set<HistoryValue>();
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (seen.has(v)) {
      anomalies.push({
        type: 'duplicate-elements',
        key,
        transactions: [reader],
        explanation: `${tx(reader)} read ${show(key)} = ${show(values)}, where ${show(v)} appears more than once, but it was appended once.`,
      });
      continue;
    }
    seen.add(v);
    const found = readAnomaly({
      reader,
      opIndex,
      key,
      read: values,
      value: v,
      site: byValue?.get(v),
      last: i === values.length - 1,
      outcomeOf,
    });
    if (found) anomalies.push(found);
  }
}
