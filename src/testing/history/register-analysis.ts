import type { Anomaly } from './anomaly.js';
import { type DependencyGraph, RW, WR, WW } from './dependency-graph.js';
import { show, tx } from './explain.js';
import type { HistoryKey, HistoryValue, RegisterHistory, TxOutcome } from './history.js';
import { readAnomaly } from './read-anomaly.js';
import type { WriterIndex, WriteSite } from './validate-history.js';

/** The initial state of a register in the version graph. */
const INITIAL = Symbol('initial');
type Version = HistoryValue | typeof INITIAL;

/**
 * Infers the dependencies of a read-write-register history into `graph` and returns the anomalies
 * seen directly in its reads. A read shows one version, not the order before it, so each key's
 * version order is only partly known; it is built from two facts (Elle's, with its "writes follow
 * reads" option on, which holds for PostgreSQL at every level: an UPDATE writes after the version
 * it found, never before what the transaction had read):
 * - the initial state precedes every written value;
 * - a committed transaction that read `v` and then wrote `w` to the same key: `v` precedes `w`.
 * For each `v` → `w` of that order: ww from the writer of `v` to the writer of `w`, rw from every
 * reader of `v` to the writer of `w`; and wr from the writer of a value to each of its readers.
 */
export function analyzeRegister(
  history: RegisterHistory,
  writers: WriterIndex,
  graph: DependencyGraph,
): Anomaly[] {
  const anomalies: Anomaly[] = [];
  const txns = history.transactions;
  const readers = new Map<HistoryKey, Map<Version, number[]>>();
  const versionEdges = new Map<HistoryKey, Map<Version, Set<HistoryValue>>>();
  const addVersionEdge = (key: HistoryKey, from: Version, to: HistoryValue) => {
    let byKey = versionEdges.get(key);
    if (!byKey) {
      byKey = new Map();
      versionEdges.set(key, byKey);
    }
    const next = byKey.get(from);
    if (next) next.add(to);
    else byKey.set(from, new Set([to]));
  };

  for (let t = 0; t < txns.length; t++) {
    const txn = txns[t]!;
    if (txn.outcome !== 'commit') continue;
    const own = new Map<HistoryKey, HistoryValue>();
    const firstRead = new Map<HistoryKey, HistoryValue | null>();
    const orderedFrom = new Set<HistoryKey>();
    for (const [opIndex, op] of txn.ops.entries()) {
      if (op.f === 'write') {
        if (firstRead.has(op.key) && !own.has(op.key) && !orderedFrom.has(op.key)) {
          orderedFrom.add(op.key);
          addVersionEdge(op.key, firstRead.get(op.key) ?? INITIAL, op.value);
        }
        own.set(op.key, op.value);
        continue;
      }
      const mine = own.get(op.key);
      if (mine !== undefined || firstRead.has(op.key)) {
        const expected = mine !== undefined ? mine : (firstRead.get(op.key) ?? null);
        if (op.value !== expected) {
          anomalies.push({
            type: 'internal',
            key: op.key,
            transactions: [t],
            explanation: `${tx(t)} read ${show(op.key)} = ${show(op.value)}, but expected ${show(expected)} from its own ${mine !== undefined ? 'write' : 'earlier read'}.`,
          });
        }
        continue;
      }
      firstRead.set(op.key, op.value);
      checkRead(t, opIndex, op.key, op.value, writers, (w) => txns[w]!.outcome, anomalies);
      let byKey = readers.get(op.key);
      if (!byKey) {
        byKey = new Map();
        readers.set(op.key, byKey);
      }
      const version: Version = op.value ?? INITIAL;
      const list = byKey.get(version);
      if (list) list.push(t);
      else byKey.set(version, [t]);
    }
  }

  const live = (site: WriteSite | undefined): site is WriteSite =>
    site !== undefined && txns[site.txn]!.outcome !== 'abort';

  for (const [key, byValue] of writers) {
    const keyReaders = readers.get(key);
    const edges = versionEdges.get(key);
    // wr: the writer of each value read → its readers
    if (keyReaders) {
      for (const [version, who] of keyReaders) {
        if (version === INITIAL) continue;
        const site = byValue.get(version);
        if (!live(site)) continue;
        for (const r of who) graph.add(site.txn, r, WR, { key, value: version, next: version });
      }
    }
    // the initial state precedes every value written
    const initialReaders = keyReaders?.get(INITIAL) ?? [];
    for (const [value, site] of byValue) {
      if (!live(site)) continue;
      for (const r of initialReaders) graph.add(r, site.txn, RW, { key, value: null, next: value });
    }
    if (!edges) continue;
    for (const [from, tos] of edges) {
      if (from === INITIAL) continue;
      const fromSite = byValue.get(from);
      const fromReaders = keyReaders?.get(from) ?? [];
      for (const to of tos) {
        const toSite = byValue.get(to);
        if (!live(toSite)) continue;
        if (live(fromSite)) graph.add(fromSite.txn, toSite.txn, WW, { key, value: from, next: to });
        for (const r of fromReaders) graph.add(r, toSite.txn, RW, { key, value: from, next: to });
      }
    }
  }
  return anomalies;
}

function checkRead(
  reader: number,
  opIndex: number,
  key: HistoryKey,
  value: HistoryValue | null,
  writers: WriterIndex,
  outcomeOf: (t: number) => TxOutcome,
  anomalies: Anomaly[],
): void {
  if (value === null) return;
  const site = writers.get(key)?.get(value);
  const found = readAnomaly({ reader, opIndex, key, read: value, value, site, last: true, outcomeOf });
  if (found) anomalies.push(found);
}
