// fast-check arbitraries for concurrency tests: the entry point 'pg-txkit/testing/arbitraries'.
//
// fast-check is an optional peer dependency of pg-txkit. Its types are needed by these declarations
// only, so they live behind an entry point of their own: 'pg-txkit/testing' type-checks in a project
// without fast-check (with `skipLibCheck: false`). This file imports only fast-check's TYPES, and every
// arbitrary takes the fast-check module as its first argument (`interleavings(fc, …)`), so importing it
// never loads fast-check either.
import type * as FastCheck from 'fast-check';
import {
  type Interleaved,
  type IsolationLevelName,
  interleavingCount,
  type SessionsSteps,
  unrank,
} from './interleavings.js';

export type { Interleaved, IsolationLevelName, SessionsSteps };

/**
 * The parts of the fast-check module the arbitraries use: pass `fc` from
 * `import fc from 'fast-check'` (or `import * as fc from 'fast-check'`).
 */
export type FastCheckModule = Pick<typeof FastCheck, 'bigInt' | 'constant' | 'constantFrom'>;

/**
 * An arbitrary of order-preserving merges of the sessions' step lists: every step of every session
 * appears once, each session's steps keep their order, and every possible merge can be produced
 * (it draws a merge's rank uniformly, with fast-check's usual bias towards the edges). It shrinks
 * towards the serial schedule (all of the first session, then the second, …).
 *
 * With SQL strings as steps, each element is a `ScheduleStep` (of 'pg-txkit/testing') ready for `Schedule.run`.
 *
 * @example
 * import fc from 'fast-check';
 * import { interleavings } from 'pg-txkit/testing/arbitraries';
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
 * An arbitrary isolation level: `'read committed' | 'repeatable read' | 'serializable'`.
 *
 * @example
 * fc.property(isolationLevel(fc), (isolation) => tm.do(fn, { isolation }));
 */
export function isolationLevel(fc: FastCheckModule): FastCheck.Arbitrary<IsolationLevelName> {
  return fc.constantFrom<IsolationLevelName>('read committed', 'repeatable read', 'serializable');
}
