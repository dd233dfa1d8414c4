// History checker benchmark: 100,000 list-append transactions checked by checkHistory (CPU only; the
// server the runner starts is not used). Two histories of the same shape, generated from a seeded
// random number generator:
// - serializable: transactions run one at a time against an in-memory store (2 reads, 2 appends,
//   10,000 keys), each recorded with its real reads, so the checker must infer every dependency and
//   find no cycle;
// - with stale reads: the same, but 1 transaction in 100 reads a key as it was 50 transactions
//   earlier, so the checker has cycles to find and explain.
// Median of 3 runs (min–max) each; the target is under 10 s for 100,000 transactions.
// Standalone: npm run build:bench && node dist-bench/bench/history-checker.js
import { pathToFileURL } from 'node:url';
import { checkHistory, type ListAppendHistory, type ListAppendOp } from '../src/testing/index.js';

const TRANSACTIONS = 100_000;
const KEYS = 10_000;
const RUNS = 3;

function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A history of `n` transactions run one at a time; `staleEvery` > 0 makes every such one read an old state. */
export function generateHistory(n: number, staleEvery: number): ListAppendHistory {
  const random = seeded(42);
  const lists: number[][] = Array.from({ length: KEYS }, () => []);
  const lengthAt: number[][] = Array.from({ length: KEYS }, () => []);
  let value = 0;
  const transactions = [];
  for (let t = 0; t < n; t++) {
    const ops: ListAppendOp[] = [];
    const stale = staleEvery > 0 && t % staleEvery === staleEvery - 1;
    for (let r = 0; r < 2; r++) {
      const k = Math.floor(random() * KEYS);
      const list = lists[k]!;
      const history = lengthAt[k]!;
      const length = stale && history.length > 0 ? history[Math.max(0, history.length - 50)]! : list.length;
      ops.push({ f: 'read', key: k, value: list.slice(0, length) });
    }
    for (let a = 0; a < 2; a++) {
      const k = Math.floor(random() * KEYS);
      lists[k]!.push(++value);
      lengthAt[k]!.push(lists[k]!.length - 1);
      ops.push({ f: 'append', key: k, value });
    }
    transactions.push({ outcome: 'commit' as const, ops, process: t % 32, start: 2 * t, end: 2 * t + 1 });
  }
  return { workload: 'list-append', transactions };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function measure(
  onProgress: (done: number, total: number) => void,
): Promise<{ name: string; ms: number[]; anomalies: number; dependencies: number }[]> {
  const cases = [
    { name: 'serializable history', history: generateHistory(TRANSACTIONS, 0) },
    { name: 'with stale reads (1 in 100)', history: generateHistory(TRANSACTIONS, 100) },
  ];
  const out = cases.map((c) => ({ name: c.name, ms: [] as number[], anomalies: 0, dependencies: 0 }));
  let done = 0;
  // interleaved: one run of each case per round
  for (let run = 0; run < RUNS; run++) {
    cases.forEach((c, i) => {
      const started = performance.now();
      const result = checkHistory(c.history, { model: 'serializable' });
      out[i]!.ms.push(performance.now() - started);
      out[i]!.anomalies = result.anomalies.length;
      out[i]!.dependencies = result.dependencies;
      onProgress(++done, RUNS * cases.length);
    });
  }
  return out;
}

/** The runner's entry (`npm run bench -- --only history-checker`). */
export async function run(context: { onProgress(done: number, total: number): void }) {
  const measured = await measure(context.onProgress);
  const base = median(measured[0]!.ms);
  return {
    name: 'history-checker',
    baseline: measured[0]!.name,
    rows: measured.map((m) => ({
      name: m.name,
      opsPerSec: Math.round(TRANSACTIONS / (median(m.ms) / 1000)),
      ratio: Math.round((base / median(m.ms)) * 100) / 100,
    })),
    notes: measured
      .map(
        (m) =>
          `${m.name}: ${TRANSACTIONS} transactions in ${(median(m.ms) / 1000).toFixed(2)} s median (${(Math.min(...m.ms) / 1000).toFixed(2)}–${(Math.max(...m.ms) / 1000).toFixed(2)} s) of ${RUNS}, ${m.dependencies} dependencies, ${m.anomalies} anomalies`,
      )
      .join('; '),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const result = await run({ onProgress: () => {} });
  console.log(result.notes.split('; ').join('\n'));
}
