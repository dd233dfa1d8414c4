// The claim floor's rules (src/queue/store/claim-floor.ts), on a clock the test moves: when a claim is a
// sweep, where the floor goes after each claim, and how far apart the sweeps are.
import { describe, expect, it } from 'vitest';
import { ClaimFloor, type ClaimOutcome, type FloorKey } from '../../src/queue/store/claim-floor.js';

const TASKS = ['a'];
const SWEEP: FloorKey = [Number.NEGATIVE_INFINITY, '0'];
const at = 1_000_000;
const outcome = (o: Partial<ClaimOutcome>): ClaimOutcome => ({
  walked: 0,
  claimed: 10,
  atMs: at,
  smallest: [at - 5_000, '42'],
  behind: false,
  ...o,
});

/** A floor on a clock at `now.t`, after one sweep of 10 jobs that read `walked` entries. */
function sweptWith(walked: number, now = { t: 0 }) {
  const floor = new ClaimFloor({ clock: () => now.t });
  expect(floor.start(TASKS)).toEqual(SWEEP);
  floor.record(TASKS, 10, SWEEP, outcome({ walked }));
  return floor;
}

/** Where the next claim starts, when it starts at the floor. */
function floorOf(floor: ClaimFloor): FloorKey {
  const from = floor.start(TASKS);
  if (from === undefined) throw new Error('the plain claim, not the floor');
  return from;
}

describe('ClaimFloor', () => {
  it('a sweep that read little leaves the plain claim until the next sweep, a second later', () => {
    const now = { t: 0 };
    const floor = sweptWith(10 + 4 * 10 + 1_024, now);
    expect(floor.start(TASKS)).toBeUndefined();
    now.t = 1_000;
    expect(floor.start(TASKS)).toEqual(SWEEP);
  });

  it('a sweep that read far more than it took puts the floor in use, at the smallest key it took', () => {
    const floor = sweptWith(10 + 4 * 10 + 1_025);
    expect(floor.start(TASKS)).toEqual([at - 5_000, '42']);
    expect(floor.start(['b'])).toEqual(SWEEP);
  });

  it('the floor never rises above now() - 200 ms, and goes there when a claim took fewer than asked', () => {
    const floor = sweptWith(50_000);
    floor.record(TASKS, 10, floorOf(floor), outcome({ atMs: at + 100, smallest: [at + 90, '99'] }));
    expect(floor.start(TASKS)).toEqual([at - 100, '0']);
    floor.record(TASKS, 10, floorOf(floor), outcome({ atMs: at + 1_000, claimed: 3 }));
    expect(floor.start(TASKS)).toEqual([at + 800, '0']);
  });

  it('a later priority waiting below the key taken, or an older key, leaves the floor where it is', () => {
    const floor = sweptWith(50_000);
    const from = floorOf(floor);
    floor.record(TASKS, 10, from, outcome({ smallest: [at - 1_000, '50'], behind: true }));
    expect(floor.start(TASKS)).toEqual(from);
    floor.record(TASKS, 10, from, outcome({ smallest: [at - 9_000, '7'] }));
    expect(floor.start(TASKS)).toEqual(from);
    floor.record(TASKS, 10, from, outcome({ smallest: [at - 5_000, '43'] }));
    expect(floor.start(TASKS)).toEqual([at - 5_000, '43']);
  });

  it("a limited claim's bound (a job it left) caps the floor, whether it took fewer than asked or not", () => {
    const floor = sweptWith(50_000);
    const from = floorOf(floor);
    // Took fewer than asked: the floor would go to now() - 200 ms, but a job held back lies below it.
    floor.record(TASKS, 10, from, outcome({ claimed: 3, bound: [at - 4_000, '60'] }));
    expect(floor.start(TASKS)).toEqual([at - 4_000, '60']);
    // Took all it asked: the smaller of the smallest key taken and the bound.
    floor.record(
      TASKS,
      10,
      floorOf(floor),
      outcome({ smallest: [at - 1_000, '90'], bound: [at - 2_000, '80'] }),
    );
    expect(floor.start(TASKS)).toEqual([at - 2_000, '80']);
    // No bound (+Infinity: it took every job it read): as the plain claim.
    floor.record(TASKS, 10, floorOf(floor), outcome({ claimed: 3, bound: [Number.POSITIVE_INFINITY, '0'] }));
    expect(floor.start(TASKS)).toEqual([at - 200, '0']);
  });

  it("a limited claim's own windows are not counted as entries left behind", () => {
    const floor = new ClaimFloor({ clock: () => 0 });
    floor.record(TASKS, 10, SWEEP, outcome({ walked: 10 + 4 * 10 + 1_025, windows: 156 }));
    expect(floor.start(TASKS)).toBeUndefined();
    floor.record(TASKS, 10, SWEEP, outcome({ walked: 10 + 4 * 10 + 1_025 + 156, windows: 156 }));
    expect(floor.start(TASKS)).toEqual([at - 5_000, '42']);
  });

  it('a limited claim whose bound is -Infinity (a later priority below its window) leaves the floor', () => {
    const floor = sweptWith(50_000);
    const from = floorOf(floor);
    floor.record(TASKS, 10, from, outcome({ claimed: 3, bound: SWEEP }));
    expect(floor.start(TASKS)).toEqual(from);
  });

  it('sweeps come every second, or one second per 10,000 entries the last one read', () => {
    const now = { t: 0 };
    const floor = sweptWith(2_000, now);
    expect(floor.start(TASKS)).toEqual([at - 5_000, '42']);
    now.t = 999;
    expect(floor.start(TASKS)).not.toEqual(SWEEP);
    now.t = 1_000;
    expect(floor.start(TASKS)).toEqual(SWEEP);
    floor.record(TASKS, 10, SWEEP, outcome({ walked: 50_000 }));
    now.t = 5_999;
    expect(floor.start(TASKS)).not.toEqual(SWEEP);
    now.t = 6_000;
    expect(floor.start(TASKS)).toEqual(SWEEP);
  });
});
