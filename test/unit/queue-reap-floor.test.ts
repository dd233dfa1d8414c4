// The reap floor's rules (src/queue/store/reap-floor.ts), on a clock the test moves: when a pass is a
// sweep, and where the floor goes after each pass.
import { describe, expect, it } from 'vitest';
import { ReapFloor } from '../../src/queue/store/reap-floor.js';

const SWEEP = Number.NEGATIVE_INFINITY;

describe('ReapFloor', () => {
  it('the first pass is a sweep; a complete one puts the floor at its now() minus the slack', () => {
    const floor = new ReapFloor({ slackMs: 1_000, sweepMs: 60_000, clock: () => 0 });
    expect(floor.start()).toBe(SWEEP);
    floor.record(SWEEP, 50_000, true);
    expect(floor.start()).toBe(49_000);
  });

  it('rises after each complete pass, never falls between sweeps', () => {
    const floor = new ReapFloor({ slackMs: 1_000, sweepMs: 60_000, clock: () => 0 });
    floor.record(SWEEP, 50_000, true);
    floor.record(49_000, 55_000, true);
    expect(floor.start()).toBe(54_000);
    floor.record(54_000, 52_000, true); // a pass whose server clock read earlier (another backend)
    expect(floor.start()).toBe(54_000);
  });

  it('a pass that stopped at its last batch (more expired leases than it went through) does not move it', () => {
    const floor = new ReapFloor({ slackMs: 1_000, sweepMs: 60_000, clock: () => 0 });
    floor.record(SWEEP, 50_000, true);
    floor.record(49_000, 80_000, false);
    expect(floor.start()).toBe(49_000);
  });

  it('a sweep that stopped at its last batch leaves the passes at the front until one goes through', () => {
    const now = { t: 0 };
    const floor = new ReapFloor({ slackMs: 1_000, sweepMs: 60_000, clock: () => now.t });
    floor.record(SWEEP, 50_000, true);
    now.t = 60_000;
    expect(floor.start()).toBe(SWEEP);
    floor.record(SWEEP, 110_000, false);
    expect(floor.start()).toBe(SWEEP);
    floor.record(SWEEP, 111_000, true);
    expect(floor.start()).toBe(110_000);
  });

  it('sweeps again once sweepMs has passed since the last sweep, and computes the floor afresh', () => {
    const now = { t: 0 };
    const floor = new ReapFloor({ slackMs: 1_000, sweepMs: 60_000, clock: () => now.t });
    floor.record(SWEEP, 50_000, true);
    now.t = 59_999;
    expect(floor.start()).toBe(49_000);
    now.t = 60_000;
    expect(floor.start()).toBe(SWEEP);
    floor.record(SWEEP, 40_000, true); // the sweep's own now() sets the floor, lower or not
    expect(floor.start()).toBe(39_000);
  });
});
