import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { interleavings, isolationLevel } from '../../src/testing/arbitraries.js';
import { allInterleavings, type Interleaved, interleavingCount } from '../../src/testing/interleavings.js';

/** Is `merged` an order-preserving merge of `sessions` (each step once, each session in order)? */
function isMergeOf(
  merged: readonly Interleaved<string, string>[],
  sessions: Record<string, string[]>,
): boolean {
  const next: Record<string, number> = Object.fromEntries(Object.keys(sessions).map((k) => [k, 0]));
  for (const [session, step] of merged) {
    const i = next[session];
    if (i === undefined || sessions[session]?.[i] !== step) return false;
    next[session] = i + 1;
  }
  return Object.entries(sessions).every(([k, steps]) => next[k] === steps.length);
}

/** Sessions with distinct, recognisable steps: { s0: ['s0.0', 's0.1'], s1: [...] }. */
const sessionsArb = fc
  .array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 4 })
  .map((lengths) =>
    Object.fromEntries(lengths.map((n, s) => [`s${s}`, Array.from({ length: n }, (_, i) => `s${s}.${i}`)])),
  );

const key = (merged: readonly Interleaved<string, string>[]): string =>
  merged.map(([, step]) => step).join(' ');

describe('interleavings()', () => {
  it('produces only order-preserving merges of the sessions (property)', () => {
    fc.assert(
      fc.property(
        sessionsArb.chain((sessions) => fc.tuple(fc.constant(sessions), interleavings(fc, sessions))),
        ([sessions, merged]) => isMergeOf(merged, sessions),
      ),
      { numRuns: 300 },
    );
  });

  it('rejects a shuffle that breaks a session order (the checker can fail)', () => {
    expect(
      isMergeOf(
        [
          ['t1', 'b'],
          ['t1', 'a'],
        ],
        { t1: ['a', 'b'] },
      ),
    ).toBe(false);
    expect(isMergeOf([['t1', 'a']], { t1: ['a', 'b'] })).toBe(false);
  });

  it.each<[Record<string, string[]>, number]>([
    [{ t1: ['a', 'b'], t2: ['c', 'd'] }, 6],
    [{ t1: ['a', 'b', 'c'], t2: ['d', 'e'] }, 10],
    [{ t1: ['a', 'b'], t2: ['c', 'd'], t3: ['e'] }, 30],
  ])('can produce every merge of %j (%i of them)', (sessions, expected) => {
    expect(interleavingCount(sessions)).toBe(BigInt(expected));
    const seen = new Set(fc.sample(interleavings(fc, sessions), { numRuns: 3000, seed: 42 }).map(key));
    expect(seen.size).toBe(expected);
    expect(new Set(allInterleavings(sessions).map(key)).size).toBe(expected);
  });

  it('handles empty and single sessions', () => {
    expect(fc.sample(interleavings(fc, {}), 3)).toEqual([[], [], []]);
    expect(fc.sample(interleavings(fc, { t1: ['a', 'b'] }), 1)).toEqual([
      [
        ['t1', 'a'],
        ['t1', 'b'],
      ],
    ]);
  });

  it('shrinks towards the serial schedule', () => {
    const sessions = { t1: ['a', 'b'], t2: ['c', 'd'] };
    const result = fc.check(
      fc.property(interleavings(fc, sessions), () => false),
      { seed: 7 },
    );
    expect(result.failed).toBe(true);
    expect(result.counterexample?.[0]).toEqual([
      ['t1', 'a'],
      ['t1', 'b'],
      ['t2', 'c'],
      ['t2', 'd'],
    ]);
  });
});

describe('allInterleavings()', () => {
  it('lists every merge once, serial schedule first', () => {
    const all = allInterleavings({ t1: ['a', 'b'], t2: ['c'] });
    expect(all.map(key)).toEqual(['a b c', 'a c b', 'c a b']);
    expect(all.every((m) => isMergeOf(m, { t1: ['a', 'b'], t2: ['c'] }))).toBe(true);
  });

  it('refuses more merges than the limit', () => {
    const big = { t1: Array.from({ length: 10 }, String), t2: Array.from({ length: 10 }, String) };
    expect(interleavingCount(big)).toBe(184756n);
    expect(() => allInterleavings(big)).toThrow(RangeError);
  });
});

describe('isolationLevel()', () => {
  it('produces the three isolation levels PostgreSQL implements', () => {
    const seen = new Set(fc.sample(isolationLevel(fc), { numRuns: 200, seed: 1 }));
    expect([...seen].sort()).toEqual(['read committed', 'repeatable read', 'serializable']);
  });
});
