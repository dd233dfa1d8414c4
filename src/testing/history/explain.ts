import type { DependencyStep } from './anomaly.js';
import type { HistoryKey, HistoryValue, TxOutcome } from './history.js';

/** A key or value as the explanations print it. */
export function show(v: HistoryKey | HistoryValue | readonly HistoryValue[] | null | undefined): string {
  if (v === null || v === undefined) return 'its initial state';
  if (Array.isArray(v)) return `[${v.map((e) => show(e)).join(' ')}]`;
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

/** `T<index>`: how a transaction is named in explanations (its index in the history). */
export const tx = (index: number): string => `T${index}`;

function because(step: DependencyStep): string {
  const a = tx(step.from);
  const b = tx(step.to);
  const key = show(step.key);
  switch (step.kind) {
    case 'ww':
      return `${b} wrote ${show(step.next)} to ${key} after ${a}'s ${show(step.value)} (ww)`;
    case 'wr':
      return `${b} read ${key} = ${show(step.next)}, which includes ${a}'s write of ${show(step.value)} (wr)`;
    case 'rw':
      return `${a} read ${key} = ${show(step.value)}, and ${b} wrote the later version ${show(step.next)} (rw)`;
    case 'realtime':
      return `${a} committed before ${b} began (realtime)`;
    case 'process':
      return `${a} committed before its client ran ${b} (process)`;
  }
}

/**
 * Explains a cycle the way Elle does: each dependency in turn, ending in the contradiction.
 *
 * @example
 * explainCycle([{ from: 1, to: 2, kind: 'rw', key: 'x', value: null, next: 5 }, …], outcomes)
 * // 'T1 < T2, because T1 read "x" = its initial state, and T2 wrote the later version 5 (rw); …'
 */
export function explainCycle(steps: readonly DependencyStep[], outcome: (t: number) => TxOutcome): string {
  const lines = steps.map((step, i) => {
    const order = `${tx(step.from)} < ${tx(step.to)}`;
    const lead = i === steps.length - 1 && steps.length > 1 ? `However, ${order}` : order;
    const tail = i === steps.length - 1 ? ': a contradiction!' : '.';
    return `  - ${lead}, because ${because(step)}${tail}`;
  });
  const who = steps.map(
    (s) => `${tx(s.from)} (${outcome(s.from) === 'commit' ? 'committed' : 'outcome unknown'})`,
  );
  return `Among ${who.join(', ')}:\n${lines.join('\n')}`;
}
