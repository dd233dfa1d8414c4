// fast-check arbitraries for concurrency tests.
//
// fast-check is an optional peer dependency of pg-txkit: this file imports only its TYPES, and every
// arbitrary takes the fast-check module as its first argument (`interleavings(fc, …)`). So importing
// 'pg-txkit/testing' never loads fast-check, and a project without it can use the rest of the kit.
import type * as FastCheck from 'fast-check';
import type { Isolation } from '../tx/types.js';

/**
 * The parts of the fast-check module the arbitraries use: pass `fc` from
 * `import fc from 'fast-check'` (or `import * as fc from 'fast-check'`).
 */
export type FastCheckModule = Pick<typeof FastCheck, 'bigInt' | 'constant' | 'constantFrom'>;

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

/** The `rank`-th merge (0 ≤ rank < count) in lexicographic order of session positions. */
function unrank<K extends string, T>(sessions: SessionsSteps<K, T>, rank: bigint): Interleaved<K, T>[] {
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
 * An arbitrary of order-preserving merges of the sessions' step lists: every step of every session
 * appears once, each session's steps keep their order, and every possible merge can be produced
 * (it draws a merge's rank uniformly, with fast-check's usual bias towards the edges). It shrinks
 * towards the serial schedule (all of the first session, then the second, …).
 *
 * With SQL strings as steps, each element is a {@link ScheduleStep} ready for `Schedule.run`.
 *
 * @example
 * import fc from 'fast-check';
 * const steps = interleavings(fc, {
 *   t1: ['begin', 'select n from acct where id = 1', 'update acct set n = 5 where id = 1', 'commit'],
 *   t2: ['begin', 'select n from acct where id = 1', 'update acct set n = 7 where id = 1', 'commit'],
 * });
 * await fc.assert(fc.asyncProperty(steps, async (merged) => {
 *   const s = await Schedule.open(url, { sessions: ['t1', 't2'] });
 *   try { await s.run(merged); } finally { await s.close(); }
 * }));
 */
export function interleavings<K extends string, T>(
  fc: FastCheckModule,
  sessions: SessionsSteps<K, T>,
): FastCheck.Arbitrary<Interleaved<K, T>[]> {
  const count = interleavingCount(sessions);
  if (count <= 1n) return fc.constant(unrank(sessions, 0n));
  return fc.bigInt({ min: 0n, max: count - 1n }).map((rank) => unrank(sessions, rank));
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

/**
 * An arbitrary isolation level: `'read committed' | 'repeatable read' | 'serializable'`.
 *
 * @example
 * fc.property(isolationLevel(fc), (isolation) => tm.do(fn, { isolation }));
 */
export function isolationLevel(fc: FastCheckModule): FastCheck.Arbitrary<IsolationLevelName> {
  return fc.constantFrom<IsolationLevelName>('read committed', 'repeatable read', 'serializable');
}
