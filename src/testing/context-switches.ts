import type { Interleaved, SessionsSteps } from './interleavings.js';

/**
 * How many times an interleaving switches from one session to another (adjacent steps of different
 * sessions). The serial order of k sessions has k - 1; an anomaly needs at least one more (another
 * session's steps must fall inside a session's run), and the order with the fewest is the easiest to
 * read: "t2 ran wholly between t1's read and its write" is 2 switches.
 *
 * @example
 * contextSwitches([['t1', 'a'], ['t2', 'c'], ['t2', 'd'], ['t1', 'b']]); // 2
 */
export function contextSwitches<K extends string, T>(merged: readonly Interleaved<K, T>[]): number {
  let switches = 0;
  for (let i = 1; i < merged.length; i++) if (merged[i]![0] !== merged[i - 1]![0]) switches++;
  return switches;
}

/**
 * Every interleaving (order-preserving merge) of the sessions' steps with exactly `switches`
 * context switches, generated lazily: an interleaving of s switches is s + 1 blocks, each a run of
 * one session's next steps, no two adjacent blocks of one session. Blocks are tried session by
 * session (in the object's order), shorter first.
 *
 * @example
 * [...interleavingsWithSwitches({ t1: ['a', 'b'], t2: ['c'] }, 1)];
 * // [[t1 a, t1 b, t2 c], [t2 c, t1 a, t1 b]]
 */
export function* interleavingsWithSwitches<K extends string, T>(
  sessions: SessionsSteps<K, T>,
  switches: number,
): Generator<Interleaved<K, T>[]> {
  const entries = Object.entries(sessions) as [K, readonly T[]][];
  const next = entries.map(() => 0);
  const merged: Interleaved<K, T>[] = [];
  const left = (j: number) => entries[j]![1].length - next[j]!;

  function* place(last: number, budget: number): Generator<Interleaved<K, T>[]> {
    let remaining = 0;
    let open = 0;
    for (let j = 0; j < entries.length; j++) {
      remaining += left(j);
      if (left(j) > 0) open++;
    }
    if (remaining === 0) {
      if (budget === 0) yield [...merged];
      return;
    }
    const cost = last === -1 ? 0 : 1;
    if (budget < cost) return;
    const after = budget - cost;
    for (let j = 0; j < entries.length; j++) {
      if (j === last || left(j) === 0) continue;
      const [session, steps] = entries[j]!;
      const available = left(j);
      for (let length = 1; length <= available; length++) {
        // what stays open after this block needs a switch each; more switches than steps cannot be made
        const stillOpen = open - (length === available ? 1 : 0);
        const stepsAfter = remaining - length;
        if (stillOpen > after || after > stepsAfter) continue;
        const start = next[j]!;
        for (let i = 0; i < length; i++) merged.push([session, steps[start + i]!]);
        next[j] = start + length;
        yield* place(j, after);
        next[j] = start;
        merged.length -= length;
      }
    }
  }
  yield* place(-1, switches);
}

/**
 * Every interleaving, fewest context switches first (the serial orders, then one more switch, …):
 * the first one that fails is a failing order with the fewest switches.
 *
 * @example
 * for (const merged of interleavingsByFewestSwitches(sessions)) { … }
 */
export function* interleavingsByFewestSwitches<K extends string, T>(
  sessions: SessionsSteps<K, T>,
  maxSwitches = Number.POSITIVE_INFINITY,
): Generator<Interleaved<K, T>[]> {
  const lists = Object.values(sessions) as readonly T[][];
  const total = lists.reduce((n, steps) => n + steps.length, 0);
  const nonEmpty = lists.filter((steps) => steps.length > 0).length;
  for (let s = Math.max(0, nonEmpty - 1); s <= Math.min(total - 1, maxSwitches); s++) {
    yield* interleavingsWithSwitches(sessions, s);
  }
}
