import type { History, HistoryKey, HistoryTransaction, HistoryValue } from './history.js';
import { TX_OUTCOMES, WORKLOADS } from './history.js';
import { HistoryError } from './history-error.js';

/** Who wrote a value of a key: the transaction, the operation, and whether it was its last write of the key. */
export interface WriteSite {
  readonly txn: number;
  readonly op: number;
  /** The transaction did not write the key again after this (a read ending here saw no intermediate state). */
  final: boolean;
}

/** Every key's written values, each with the one place that wrote it. */
export type WriterIndex = Map<HistoryKey, Map<HistoryValue, WriteSite>>;

const isKey = (v: unknown): v is HistoryKey =>
  typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));
const isValue = isKey;

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/**
 * Checks a history's shape before anything is inferred from it, and indexes who wrote what.
 * Throws {@link HistoryError} at the first problem, with its position and what to do.
 */
export function validateHistory(history: History): WriterIndex {
  if (typeof history !== 'object' || history === null || !Array.isArray(history.transactions)) {
    throw new HistoryError(
      'not-a-history',
      `expected { workload, transactions: [...] }, got ${describe(history)}; build one with ListAppendRecorder or RegisterRecorder`,
    );
  }
  const workload: unknown = history.workload;
  if (!WORKLOADS.includes(workload as History['workload'])) {
    throw new HistoryError(
      'unknown-workload',
      `unknown workload ${describe(workload)}: use 'list-append' (appends to lists) or 'rw-register' (writes of single values)`,
    );
  }
  const listAppend = workload === 'list-append';
  const writeName = listAppend ? 'append' : 'write';
  const writers: WriterIndex = new Map();
  const txns = history.transactions as readonly HistoryTransaction<{
    f: unknown;
    key: unknown;
    value: unknown;
  }>[];
  for (let t = 0; t < txns.length; t++) {
    const txn = txns[t];
    if (typeof txn !== 'object' || txn === null || !Array.isArray(txn.ops)) {
      throw new HistoryError('not-a-history', `expected { outcome, ops: [...] }, got ${describe(txn)}`, t);
    }
    if (!TX_OUTCOMES.includes(txn.outcome)) {
      throw new HistoryError(
        'unknown-outcome',
        `unknown outcome ${describe(txn.outcome)}: use 'commit' (COMMIT returned), 'abort' (rolled back or failed before COMMIT) or 'unknown' (the connection was lost while COMMIT was in flight)`,
        t,
      );
    }
    for (const field of ['start', 'end'] as const) {
      const v = txn[field];
      if (v !== undefined && (typeof v !== 'number' || !Number.isFinite(v))) {
        throw new HistoryError(
          'bad-clock',
          `${field} must be a finite number on the clock shared by all clients, got ${describe(v)}`,
          t,
        );
      }
    }
    if (txn.start !== undefined && txn.end !== undefined && txn.end < txn.start) {
      throw new HistoryError(
        'bad-clock',
        `end (${txn.end}) is before start (${txn.start}): record start at BEGIN and end when COMMIT returned`,
        t,
      );
    }
    const last = new Map<HistoryKey, WriteSite>();
    for (let o = 0; o < txn.ops.length; o++) {
      const op = txn.ops[o];
      if (typeof op !== 'object' || op === null) {
        throw new HistoryError('unknown-operation', `expected { f, key, value }, got ${describe(op)}`, t, o);
      }
      if (op.f !== 'read' && op.f !== writeName) {
        const other = listAppend
          ? "'write' belongs to the 'rw-register' workload"
          : "'append' belongs to the 'list-append' workload";
        throw new HistoryError(
          'unknown-operation',
          `unknown operation ${describe(op.f)} in a ${workload} history: use 'read' or '${writeName}' (${other})`,
          t,
          o,
        );
      }
      if (!isKey(op.key)) {
        throw new HistoryError(
          'no-key',
          `${op.f} on no key (key is ${describe(op.key)}): every operation names the key it read or wrote (a string or a finite number)`,
          t,
          o,
        );
      }
      if (op.f === 'read') {
        const v = op.value;
        const ok = listAppend
          ? v === null || (Array.isArray(v) && v.every(isValue))
          : v === null || isValue(v);
        if (!ok) {
          throw new HistoryError(
            'bad-read',
            listAppend
              ? `read of ${describe(op.key)} returned ${describe(v)}: record the list it returned (an array of strings or numbers; [] or null when the key had none); leave out a read that did not return`
              : `read of ${describe(op.key)} returned ${describe(v)}: record the value it returned (a string or a number; null when the key had none); leave out a read that did not return`,
            t,
            o,
          );
        }
        continue;
      }
      if (!isValue(op.value)) {
        throw new HistoryError(
          'bad-value',
          `${op.f} of ${describe(op.value)} to ${describe(op.key)}: a written value is a string or a finite number`,
          t,
          o,
        );
      }
      let byValue = writers.get(op.key);
      if (!byValue) {
        byValue = new Map();
        writers.set(op.key, byValue);
      }
      const seen = byValue.get(op.value);
      if (seen) {
        throw new HistoryError(
          'duplicate-write',
          `${describe(op.value)} was already written to ${describe(op.key)} by transaction ${seen.txn} (operation ${seen.op}): values written to a key must be unique, or a read cannot say whose write it saw; write a fresh value each time (a counter)`,
          t,
          o,
        );
      }
      const site: WriteSite = { txn: t, op: o, final: true };
      const previous = last.get(op.key);
      if (previous) previous.final = false;
      last.set(op.key, site);
      byValue.set(op.value, site);
    }
  }
  return writers;
}
