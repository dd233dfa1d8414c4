import { errAsync, okAsync, ResultAsync } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import { DbError } from '../../src/errors/errors.js';
import { ScheduleLoop } from '../../src/queue/schedules/schedule-loop.js';
import type { SchedulePassResult } from '../../src/queue/schedules/schedule-pass.js';

const empty: SchedulePassResult = {
  fired: [],
  skipped: 0,
  redefined: [],
  disabled: [],
  unreadable: [],
  ended: [],
  failed: [],
};

describe('ScheduleLoop', () => {
  it('goes on after a failing pass and after a pass that rejects (a defect); declares on the first pass', async () => {
    const calls: boolean[] = [];
    const errors: unknown[] = [];
    const defect = new TypeError('a bug in a pass');
    let passes = 0;
    let resolveThird: () => void = () => {};
    const third = new Promise<void>((resolve) => {
      resolveThird = resolve;
    });
    const loop = new ScheduleLoop({
      pass: (o) => {
        calls.push(o.declare);
        passes++;
        if (passes === 1) return errAsync(new DbError(undefined, 'down', undefined));
        if (passes === 2) return new ResultAsync(Promise.reject(defect));
        return okAsync(empty);
      },
      intervalMs: 10,
      livenessMs: 60_000,
      onPass: () => resolveThird(),
      onError: (e) => errors.push(e),
    });
    loop.start();
    await third;
    await loop.stop();
    expect(errors).toHaveLength(2);
    expect(errors[1]).toBe(defect);
    // The first two passes failed, so the declaration is retried until one succeeds.
    expect(calls.slice(0, 3)).toEqual([true, true, true]);
  });
});
