// Interleavings of sessions' steps: how many there are and every one of them. Pure, no fast-check
// (the fast-check arbitraries over them live in ./arbitraries.ts, entry point 'pg-txkit/testing/arbitraries').
import type { Isolation } from '../tx/types.js';

/** An isolation level name, as `TxOptions.isolation` takes it. */
export type IsolationLevelName = Isolation;

/** Each session's steps, in that session's order. */
export type SessionsSteps<K extends string, T> = Readonly<Record<K, readonly T[]>>;

/** One step of a merged schedule: the session it belongs to and the step itself. */
export type Interleaved<K extends string, T> = readonly [session: K, step: T];

function factorial(n: number): bigint {
  let f = 1n;
  for (let i = 2n; i <= BigInt(n); i++) f *= i;
  return f;
}

/** Number of distinct sequences of a multiset with these counts: (Σc)! / Π(c!). */
function multinomial(counts: readonly number[]): bigint {
  let result = factorial(counts.reduce((a, b) => a + b, 0));
  for (const c of counts) result /= factorial(c);
  return result;
}

function entriesOf<K extends string, T>(sessions: SessionsSteps<K, T>): [K, readonly T[]][] {
  return Object.entries(sessions) as [K, readonly T[]][];
}

/**
 * How many order-preserving merges (interleavings) the sessions' step lists have: the multinomial
 * coefficient (n₁ + … + n_k)! / (n₁! · … · n_k!).
 *
 * @example
 * interleavingCount({ t1: ['a', 'b'], t2: ['c', 'd'] }); // 6n
 */
export function interleavingCount<K extends string, T>(sessions: SessionsSteps<K, T>): bigint {
  return multinomial(entriesOf(sessions).map(([, steps]) => steps.length));
}

/**
 * The `rank`-th merge (0 ≤ rank < count) in lexicographic order of session positions (the arbitraries
 * draw a rank and unrank it).
 */
export function unrank<K extends string, T>(
  sessions: SessionsSteps<K, T>,
  rank: bigint,
): Interleaved<K, T>[] {
  const entries = entriesOf(sessions);
  const counts = entries.map(([, steps]) => steps.length);
  const next = entries.map(() => 0);
  const total = counts.reduce((a, b) => a + b, 0);
  const merged: Interleaved<K, T>[] = [];
  let r = rank;
  for (let position = 0; position < total; position++) {
    for (let j = 0; j < entries.length; j++) {
      const c = counts[j] ?? 0;
      if (c === 0) continue;
      counts[j] = c - 1;
      const startingWithJ = multinomial(counts);
      if (r < startingWithJ) {
        const [session, steps] = entries[j] as [K, readonly T[]];
        const i = next[j] ?? 0;
        merged.push([session, steps[i] as T]);
        next[j] = i + 1;
        break;
      }
      r -= startingWithJ;
      counts[j] = c;
    }
  }
  return merged;
}

/**
 * Every order-preserving merge of the sessions' step lists, in a fixed order (the serial schedule
 * first). For small schedules, checking all of them beats sampling. Throws a `RangeError` when
 * there are more than `limit` (default 10 000).
 *
 * @example
 * for (const merged of allInterleavings({ t1: ['a', 'b'], t2: ['c'] })) {
 *   // [['t1','a'],['t1','b'],['t2','c']], [['t1','a'],['t2','c'],['t1','b']], [['t2','c'],['t1','a'],['t1','b']]
 * }
 */
export function allInterleavings<K extends string, T>(
  sessions: SessionsSteps<K, T>,
  limit = 10_000,
): Interleaved<K, T>[][] {
  const count = interleavingCount(sessions);
  if (count > BigInt(limit)) {
    throw new RangeError(
      `${count} interleavings is more than the limit of ${limit}; sample with interleavings()`,
    );
  }
  const all: Interleaved<K, T>[][] = [];
  for (let rank = 0n; rank < count; rank++) all.push(unrank(sessions, rank));
  return all;
}
