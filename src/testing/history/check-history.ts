import { z } from 'zod/v4';
import { parseOptions } from '../../errors/parse-options.js';
import type { Anomaly, AnomalyType, DependencyStep } from './anomaly.js';
import { CONSISTENCY_MODELS, type ConsistencyModel, FORBIDDEN_ANOMALIES } from './consistency-models.js';
import { DependencyGraph, kindName, PROCESS, REALTIME } from './dependency-graph.js';
import { explainCycle } from './explain.js';
import { type FoundCycle, findCycles, usesProcess, usesRealtime } from './find-cycles.js';
import type { History, HistoryTransaction } from './history.js';
import { analyzeListAppend } from './list-append-analysis.js';
import { lostUpdates } from './lost-update.js';
import { addProcessEdges } from './process-edges.js';
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
    /**
     * Session order too: each client (`process`) sees what it committed before (Elle's strong
     * session models). Cycles that need it are typed `…-process`, and the model forbids those
     * variants of its cycle anomalies. Default false.
     */
    processOrder: z.boolean().default(false),
  })
  .strict();

/** Options of {@link checkHistory}. */
export type CheckHistoryOptions = z.input<typeof checkHistoryOptionsSchema>;

/** What {@link checkHistory} decided. */
export interface HistoryCheck {
  /** The history shows none of the anomalies `model` forbids. */
  readonly valid: boolean;
  /** The model that was decided (the option, or `'serializable'` when none was given). */
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
  /** Session order was checked (`processOrder`): `valid` and `satisfies` are then the strong-session variants. */
  readonly processOrder: boolean;
  /** How many transactions the history holds (whatever their outcome). */
  readonly transactions: number;
  /**
   * How many dependencies were inferred between them: every ww, wr and rw edge, with the real-time
   * and session-order edges when those were checked (a pair linked for two keys counts twice).
   */
  readonly dependencies: number;
}

const REALTIME_TYPE = {
  G0: 'G0-realtime',
  G1c: 'G1c-realtime',
  'G-single': 'G-single-realtime',
  'G-nonadjacent': 'G-nonadjacent-realtime',
  'G2-item': 'G2-item-realtime',
} as const satisfies Record<FoundCycle['type'], AnomalyType>;

const PROCESS_TYPE = {
  G0: 'G0-process',
  G1c: 'G1c-process',
  'G-single': 'G-single-process',
  'G-nonadjacent': 'G-nonadjacent-process',
  'G2-item': 'G2-item-process',
} as const satisfies Record<FoundCycle['type'], AnomalyType>;

/** What `model` forbids; with session order, also the `-process` variants of its cycle anomalies. */
function forbiddenFor(model: ConsistencyModel, processOrder: boolean): readonly AnomalyType[] {
  const base: readonly AnomalyType[] = FORBIDDEN_ANOMALIES[model];
  if (!processOrder) return base;
  const variants = Object.entries(PROCESS_TYPE)
    .filter(([cycle]) => base.includes(cycle as AnomalyType))
    .map(([, variant]) => variant);
  return [...base, ...variants];
}

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
  'dirty-update',
  'garbage-read',
  'future-read',
  'duplicate-elements',
  'incompatible-order',
  'G0-realtime',
  'G1c-realtime',
  'G-single-realtime',
  'G-nonadjacent-realtime',
  'G2-item-realtime',
  'G0-process',
  'G1c-process',
  'G-single-process',
  'G-nonadjacent-process',
  'G2-item-process',
];

/**
 * Decides whether a recorded history of concurrent transactions is serializable,
 * snapshot-isolated or read-committed, as Jepsen's Elle does: it infers the dependencies between
 * transactions (ww, wr, rw; real-time order for `'strict-serializable'`; session order with
 * `processOrder`) from what they read and
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
  const { model, searchBudget, processOrder } = parsed.value;
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
  if (processOrder) addProcessEdges(txns, graph);
  graph.freeze();

  const outcome = (t: number) => txns[t]!.outcome;
  const budget = { left: searchBudget };
  // Adya's cycles first; then those that need session order; then those that need real-time order
  const cycles: { type: AnomalyType; edges: readonly number[] }[] = findCycles(graph, 0, budget);
  if (processOrder) {
    for (const c of findCycles(graph, PROCESS, budget)) {
      if (usesProcess(graph, c.edges)) cycles.push({ type: PROCESS_TYPE[c.type], edges: c.edges });
    }
  }
  if (strict) {
    for (const c of findCycles(graph, REALTIME | (processOrder ? PROCESS : 0), budget)) {
      if (usesRealtime(graph, c.edges)) cycles.push({ type: REALTIME_TYPE[c.type], edges: c.edges });
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
      type: cycle.type,
      transactions: steps.map((s) => s.from),
      cycle: steps,
      explanation: explainCycle(steps, outcome),
    });
  }

  const found = new Set(anomalies.map((a) => a.type));
  const anomalyTypes = TYPE_ORDER.filter((t) => found.has(t));
  const forbiddenBy = (m: ConsistencyModel) => forbiddenFor(m, processOrder).filter((t) => found.has(t));
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
    processOrder,
    transactions: txns.length,
    dependencies: graph.edgeCount,
  };
}
