import { describe, expect, it } from 'vitest';
import { limitsDeclaration, ratesDeclared } from '../../src/queue/group-limits.js';
import { parseOptions, queueOptionsSchema, RATE_GUARD_MS } from '../../src/queue/queue-options.js';

const base = { pool: { connect() {}, query() {} }, txManager: { do() {} }, tasks: {} };

describe('limitsDeclaration', () => {
  it('is undefined when nothing is limited: the plain claim', () => {
    expect(limitsDeclaration(undefined, undefined)).toBeUndefined();
    expect(limitsDeclaration({}, {})).toBeUndefined();
  });

  it('carries the default, the named groups and the task rates, durations in ms', () => {
    const parsed = parseOptions(queueOptionsSchema, {
      ...base,
      groups: { default: { concurrency: 1 }, vip: { concurrency: 4, rate: { limit: 100, per: '1m' } } },
      taskRates: { email: { limit: 10, per: '1s' } },
    })._unsafeUnwrap();
    expect(JSON.parse(limitsDeclaration(parsed.groups, parsed.taskRates) ?? 'null')).toEqual({
      default: { concurrency: 1 },
      groups: { vip: { concurrency: 4, rate: { limit: 100, perMs: 60_000 + RATE_GUARD_MS } } },
      tasks: { email: { limit: 10, perMs: 1000 + RATE_GUARD_MS } },
    });
  });

  it("sends the window a claim checks: a rate's period plus its guard (100 ms unless given; 0 for none)", () => {
    expect(RATE_GUARD_MS).toBe(100);
    const parsed = parseOptions(queueOptionsSchema, {
      ...base,
      groups: { default: { rate: { limit: 4, per: '250ms', guard: '20ms' } } },
      taskRates: { email: { limit: 10, per: '1s', guard: 0 }, sms: { limit: 1, per: '1m' } },
    })._unsafeUnwrap();
    expect(JSON.parse(limitsDeclaration(parsed.groups, parsed.taskRates) ?? 'null')).toEqual({
      default: { rate: { limit: 4, perMs: 270 } },
      groups: {},
      tasks: { email: { limit: 10, perMs: 1000 }, sms: { limit: 1, perMs: 60_100 } },
    });
  });

  it('refuses a guard that is not a duration', () => {
    for (const guard of [-1, 1.5, '1 second', Number.POSITIVE_INFINITY]) {
      const taskRates = { email: { limit: 10, per: '1s', guard } };
      expect(parseOptions(queueOptionsSchema, { ...base, taskRates })._unsafeUnwrapErr().kind).toBe(
        'InvalidOptions',
      );
    }
  });

  it('refuses a group limit with neither concurrency nor rate, and a window under 1 ms', () => {
    for (const groups of [{ default: {} }, { g: { rate: { limit: 1, per: 0 } } }]) {
      expect(parseOptions(queueOptionsSchema, { ...base, groups })._unsafeUnwrapErr().kind).toBe(
        'InvalidOptions',
      );
    }
  });
});

describe('ratesDeclared (a completion takes group slots over only without rates)', () => {
  it("is false for concurrency limits alone, true for any rate: a group's, the default's or a task's", () => {
    const rate = { limit: 1, per: 1000, guard: 0 };
    expect(ratesDeclared(undefined, undefined)).toBe(false);
    expect(ratesDeclared({ default: { concurrency: 1 }, big: { concurrency: 8 } }, {})).toBe(false);
    expect(ratesDeclared({ default: { concurrency: 1, rate } }, undefined)).toBe(true);
    expect(ratesDeclared({ default: { concurrency: 1 }, big: { rate } }, undefined)).toBe(true);
    expect(ratesDeclared({ default: { concurrency: 1 } }, { email: rate })).toBe(true);
  });
});
