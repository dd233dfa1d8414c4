import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { MIN_LEASE_MS, queueOptionsSchema } from '../../src/queue/queue-options.js';
import { durationSchema, spanSchema, timeoutSchema } from '../../src/tx/duration.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { parseTxOptions } from '../../src/tx/tx-options.js';

// One grammar everywhere: an input is accepted or refused the same way by every option that takes a
// duration (only the bounds differ by meaning: a timeout ≥ 1 ms, a PostgreSQL setting ≤ int32 ms, a
// lease ≥ 5 s: a lease below it is read by the grammar and refused by that bound alone).
const BELOW_FLOOR = 'read, and refused as shorter than the lease floor';
const pool = new pg.Pool({ max: 1 });
const tm = new TxManager(pool);

const readers: Record<string, (input: unknown) => number | string | undefined> = {
  durationSchema: (input) => durationSchema.safeParse(input).data,
  timeoutSchema: (input) => timeoutSchema.safeParse(input).data,
  spanSchema: (input) => spanSchema.safeParse(input).data,
  'TxOptions.lockTimeout': (input) =>
    parseTxOptions({ lockTimeout: input })
      .map((s) => s.lockTimeout)
      .unwrapOr(undefined),
  'IdempotencyKeys ttl': (input) => {
    try {
      return new IdempotencyKeys(tm, { ttl: input as never }).ttlMs;
    } catch {
      return undefined;
    }
  },
  'Queue lease': (input) => {
    const parsed = queueOptionsSchema.safeParse({ pool, txManager: tm, tasks: {}, lease: input });
    if (parsed.success) return (parsed.data as { lease: number }).lease;
    const issues = parsed.error.issues;
    return issues.length === 1 && issues[0]?.message.startsWith('at least 5 s') ? BELOW_FLOOR : undefined;
  },
};

describe('one duration grammar', () => {
  it.each([
    ['1.5s', 1500],
    ['1min', 60_000],
    ['1m', 60_000],
    ['7d', 604_800_000],
    ['250ms', 250],
    [' 2h ', 7_200_000],
    [3000, 3000],
  ])('%j is %d ms for every option', (input, ms) => {
    for (const [name, read] of Object.entries(readers)) {
      const expected = name === 'Queue lease' && ms < MIN_LEASE_MS ? BELOW_FLOOR : ms;
      expect([name, read(input)]).toEqual([name, expected]);
    }
  });

  it.each(['5x', '1e3ms', '-2s', '1.0001ms', '10', '', 'soon', -1, 1.5, Number.NaN])(
    '%j is refused by every option',
    (input) => {
      for (const [name, read] of Object.entries(readers))
        expect([name, read(input)]).toEqual([name, undefined]);
    },
  );

  it('a timeout of 0 is refused, saying to omit the option for no limit', () => {
    expect(timeoutSchema.safeParse(0).error?.issues[0]?.message).toContain('omit the option for no limit');
    expect(timeoutSchema.safeParse('0ms').success).toBe(false);
    expect(durationSchema.parse(0)).toBe(0);
  });
});
