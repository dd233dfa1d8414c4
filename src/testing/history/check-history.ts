import { z } from 'zod/v4';
import { parseOptions } from '../../errors/parse-options.js';
import type { Anomaly, AnomalyType, DependencyStep } from './anomaly.js';
import { CONSISTENCY_MODELS, type ConsistencyModel, FORBIDDEN_ANOMALIES } from './consistency-models.js';
import { DependencyGraph, kindName, REALTIME } from './dependency-graph.js';
import { explainCycle } from './explain.js';
import { type FoundCycle, findCycles, usesRealtime } from './find-cycles.js';
import type { History, HistoryTransaction } from './history.js';
import { analyzeListAppend } from './list-append-analysis.js';
import { lostUpdates } from './lost-update.js';
import { addRealtimeEdges } from './realtime-edges.js';
import { analyzeRegister } from './register-analysis.js';
import { validateHistory } from './validate-history.js';

const checkHistoryOptionsSchema = z
  .object({
    /** The model to decide. Default `'serializable'`. */
    model: z.enum(CONSISTENCY_MODELS).default('serializable'),
    /**
     * Transactions the G-single searches may visit in all (one search per anti-dependency of a
     * cycle's component). Default 5,000,000: 100,000 transactions check in about a second.
     */
    searchBudget: z.number().int().positive().default(5_000_000),
  })
  .strict();

/** Options of {@link checkHistory}. */
export type CheckHistoryOptions = z.input<typeof checkHistoryOptionsSchema>;

/** What {@link checkHistory} decided. */
export interface HistoryCheck {
  /** The history shows none of the anomalies `model` forbids. */
  readonly valid: boolean;
  readonly model: ConsistencyModel;
  /** Every anomaly found (one cycle per type and component), forbidden by `model` or not. */
  readonly anomalies: readonly Anomaly[];
  /** The types found, in the order of {@link AnomalyType}'s list. */
  readonly anomalyTypes: readonly AnomalyType[];
  /** The types found that `model` forbids: why `valid` is false. */
  readonly forbidden: readonly AnomalyType[];
  /**
   * The models no anomaly found rules out, weakest first (`'strict-serializable'` only when it was
   * the model checked, since only then is real-time order inferred).
   */
  readonly satisfies: readonly ConsistencyModel[];
  /** How many transactions, and how many dependencies were inferred between them. */
  readonly transactions: number;
  readonly dependencies: number;
}

const REALTIME_TYPE = {
  G0: 'G0-realtime',
  G1c: 'G1c-realtime',
  'G-single': 'G-single-realtime',
  'G-nonadjacent': 'G-nonadjacent-realtime',
  'G2-item': 'G2-item-realtime',
} as const satisfies Record<FoundCycle['type'], AnomalyType>;

const TYPE_ORDER: readonly AnomalyType[] = [
  'G0',
  'G1a',
  'G1b',
  'G1c',
  'G-single',
  'G-nonadjacent',
  'G2-item',
  'lost-update',
  'internal',
  'garbage-read',
  'future-read',
  'duplicate-elements',
  'incompatible-order',
  'G0-realtime',
  'G1c-realtime',
  'G-single-realtime',
  'G-nonadjacent-realtime',
  'G2-item-realtime',
];

/**
 * Decides whether a recorded history of concurrent transactions is serializable,
 * snapshot-isolated or read-committed, as Jepsen's Elle does: it infers the dependencies between
 * transactions (ww, wr, rw; real-time order for `'strict-serializable'`) from what they read and
 * wrote, finds the cycles, and names each anomaly (G0, G1a, G1b, G1c, G-single, G2-item, lost
 * update, …) with the cycle of transactions that proves it. Transactions are named `T<index>` after
 * their position in the history.
 *
 * Throws {@link HistoryError} for a history it cannot read (an operation on no key, an unknown
 * outcome, a value written twice to one key, …) and `InvalidOptions` for bad options.
 *
 * @example
 * const h = new ListAppendRecorder();
 * const t1 = h.begin('p1');
 * const t2 = h.begin('p2');
 * t1.read('x', []).read('y', []);
 * t2.read('x', []).read('y', []);
 * t1.append('x', 1).commit();
 * t2.append('y', 1).commit();
 * const r = h.begin('p3');
 * r.read('x', [1]).read('y', [1]).commit();
 * const result = checkHistory(h.history(), { model: 'serializable' });
 * result.valid;        // false
 * result.anomalyTypes; // ['G2-item']: write skew
 * console.log(result.anomalies[0]?.explanation);
 */
export function checkHistory(history: History, options: CheckHistoryOptions = {}): HistoryCheck {
  const parsed = parseOptions(checkHistoryOptionsSchema, options);
  if (parsed.isErr()) throw parsed.error;
  const { model, searchBudget } = parsed.value;
  const writers = validateHistory(history);
  const txns = history.transactions as readonly HistoryTransaction<unknown>[];
  const graph = new DependencyGraph(txns.length);
  const anomalies: Anomaly[] =
    history.workload === 'list-append'
      ? analyzeListAppend(history, writers, graph)
      : analyzeRegister(history, writers, graph);
  anomalies.push(...lostUpdates(history.transactions));
  const strict = model === 'strict-serializable';
  if (strict) addRealtimeEdges(txns, graph);
  graph.freeze();

  const outcome = (t: number) => txns[t]!.outcome;
  const budget = { left: searchBudget };
  const cycles: { type: FoundCycle['type']; edges: readonly number[]; realtime: boolean }[] = findCycles(
    graph,
    0,
    budget,
  ).map((c) => ({ ...c, realtime: false }));
  if (strict) {
    for (const c of findCycles(graph, REALTIME, budget)) {
      if (usesRealtime(graph, c.edges)) cycles.push({ ...c, realtime: true });
    }
  }
  for (const cycle of cycles) {
    const steps: DependencyStep[] = cycle.edges.map((id) => {
      const e = graph.edge(id);
      return {
        from: e.from,
        to: e.to,
        kind: kindName(e.kind),
        ...(e.why.key === undefined ? {} : { key: e.why.key }),
        ...(e.why.value === undefined ? {} : { value: e.why.value }),
        ...(e.why.next === undefined ? {} : { next: e.why.next }),
      };
    });
    anomalies.push({
      type: cycle.realtime ? REALTIME_TYPE[cycle.type] : cycle.type,
      transactions: steps.map((s) => s.from),
      cycle: steps,
      explanation: explainCycle(steps, outcome),
    });
  }

  const found = new Set(anomalies.map((a) => a.type));
  const anomalyTypes = TYPE_ORDER.filter((t) => found.has(t));
  const forbiddenBy = (m: ConsistencyModel) =>
    (FORBIDDEN_ANOMALIES[m] as readonly AnomalyType[]).filter((t) => found.has(t));
  const forbidden = forbiddenBy(model);
  anomalies.sort((a, b) => TYPE_ORDER.indexOf(a.type) - TYPE_ORDER.indexOf(b.type));
  return {
    valid: forbidden.length === 0,
    model,
    anomalies,
    anomalyTypes,
    forbidden,
    satisfies: CONSISTENCY_MODELS.filter(
      (m) => (m !== 'strict-serializable' || strict) && forbiddenBy(m).length === 0,
    ),
    transactions: txns.length,
    dependencies: graph.edgeCount,
  };
}
