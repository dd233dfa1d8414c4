import { describe, expect, it } from 'vitest';
import {
  contextSwitches,
  interleavingsByFewestSwitches,
  interleavingsWithSwitches,
} from '../../src/testing/context-switches.js';
import { allInterleavings, interleavingCount } from '../../src/testing/interleavings.js';

// What must hold: ordering interleavings by context switches loses none and repeats none (the same
// set as allInterleavings), and they come fewest switches first.

const show = (merged: readonly (readonly [string, string])[]) => merged.map(([s, x]) => `${s}${x}`).join(' ');

describe('interleavings by context switches', () => {
  it('counts the switches of an order', () => {
    expect(contextSwitches([])).toBe(0);
    expect(
      contextSwitches([
        ['t1', 'a'],
        ['t1', 'b'],
      ]),
    ).toBe(0);
    expect(
      contextSwitches([
        ['t1', 'a'],
        ['t2', 'c'],
        ['t2', 'd'],
        ['t1', 'b'],
      ]),
    ).toBe(2);
  });

  it('yields exactly the orders with that many switches', () => {
    expect([...interleavingsWithSwitches({ t1: ['a', 'b'], t2: ['c'] }, 1)].map(show)).toEqual([
      't1a t1b t2c',
      't2c t1a t1b',
    ]);
    expect([...interleavingsWithSwitches({ t1: ['a', 'b'], t2: ['c'] }, 2)].map(show)).toEqual([
      't1a t2c t1b',
    ]);
    expect([...interleavingsWithSwitches({ t1: ['a', 'b'], t2: ['c'] }, 3)]).toEqual([]);
  });

  const cases: Record<string, readonly string[]>[] = [
    { t1: ['a', 'b', 'c'], t2: ['d', 'e'], t3: ['f', 'g'] },
    { t1: ['a', 'b', 'c', 'd'], t2: ['e', 'f', 'g', 'h'] },
    { t1: ['a'], t2: [], t3: ['b', 'c'] },
  ];
  it.each(cases.map((c) => [c] as const))(
    'every interleaving once, fewest switches first: %j',
    (sessions) => {
      const ordered = [...interleavingsByFewestSwitches(sessions)];
      expect(BigInt(ordered.length)).toBe(interleavingCount(sessions));
      expect(new Set(ordered.map(show))).toEqual(new Set(allInterleavings(sessions).map(show)));
      const switches = ordered.map(contextSwitches);
      expect(switches).toEqual([...switches].sort((a, b) => a - b));
    },
  );

  it('stops at maxSwitches', () => {
    const sessions = { t1: ['a', 'b', 'c', 'd'], t2: ['e', 'f', 'g', 'h'] };
    expect([...interleavingsByFewestSwitches(sessions, 2)].map(contextSwitches)).toEqual([
      1, 1, 2, 2, 2, 2, 2, 2,
    ]);
  });
});
