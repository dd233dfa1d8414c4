import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidOptions } from '../../src/errors/index.js';
import { beginSql } from '../../src/tx/begin-sql.js';
import { durationSchema } from '../../src/tx/duration.js';
import { DEFAULT_RETRY_ON, mergeTxOptions, parseTxOptions } from '../../src/tx/tx-options.js';

/** The only shape a BEGIN text may have: fixed keywords and integers, nothing else. */
const BEGIN_TEXT =
  /^BEGIN ISOLATION LEVEL (READ COMMITTED|REPEATABLE READ|SERIALIZABLE)( READ ONLY)?( DEFERRABLE)?(; SET LOCAL lock_timeout = \d+)?(; SET LOCAL statement_timeout = \d+)?(; SET LOCAL idle_in_transaction_session_timeout = \d+)?$/;

const durationish = fc.oneof(
  fc.integer({ min: -10, max: 3_000_000_000 }),
  fc.double(),
  fc.constantFrom(
    '500ms',
    '2s',
    '1m',
    '1.5s',
    '1h',
    '0ms',
    '-1s',
    '2 s',
    '5 parsecs',
    "1s'; DROP TABLE x; --",
    '',
    'NaN',
  ),
  fc.string(),
);

/** Objects built from the option keys, with values that are often valid and often not. */
const optionsLike = fc.record(
  {
    isolation: fc.oneof(
      fc.constantFrom('read committed', 'repeatable read', 'serializable', 'snapshot', 'SERIALIZABLE'),
      fc.string(),
    ),
    readOnly: fc.oneof(fc.boolean(), fc.constant('yes')),
    deferrable: fc.oneof(fc.boolean(), fc.constant(1)),
    lockTimeout: durationish,
    statementTimeout: durationish,
    idleInTransactionTimeout: durationish,
    acquireTimeout: durationish,
    maxAttempts: fc.oneof(fc.integer({ min: -2, max: 200 }), fc.double()),
    retryOn: fc.array(
      fc.constantFrom('SerializationFailure', 'DeadlockDetected', 'CommitOutcomeUnknown', 'Nope'),
    ),
    backoff: fc.record({ baseMs: durationish, capMs: durationish }, { requiredKeys: [] }),
    deadline: durationish,
    propagation: fc.constantFrom('required', 'nested', 'requiresNew', 'mandatory', 'never'),
    name: fc.string(),
    signal: fc.constantFrom(new AbortController().signal, 'signal'),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
);

describe('TxOptions schema', () => {
  it('any input either parses to options that build a valid BEGIN text, or gives InvalidOptions (never throws)', () => {
    fc.assert(
      fc.property(
        fc.oneof(optionsLike, fc.anything()),
        fc.oneof(optionsLike, fc.constant(undefined)),
        (call, defaults) => {
          const result = parseTxOptions(call, defaults);
          if (result.isOk()) {
            expect(beginSql(result.value)).toMatch(BEGIN_TEXT);
            expect(result.value.maxAttempts).toBeGreaterThanOrEqual(1);
            expect(result.value.backoff.baseMs).toBeLessThanOrEqual(result.value.backoff.capMs);
          } else {
            expect(result.error).toBeInstanceOf(InvalidOptions);
            expect(result.error.issues.length).toBeGreaterThan(0);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('applies the defaults', () => {
    const settings = parseTxOptions(undefined)._unsafeUnwrap();
    expect(settings).toMatchObject({
      isolation: 'read committed',
      readOnly: false,
      deferrable: false,
      maxAttempts: 5,
      retryOn: [...DEFAULT_RETRY_ON],
      backoff: { baseMs: 10, capMs: 1000 },
      propagation: 'required',
    });
    expect(settings.lockTimeout).toBeUndefined();
  });

  it.each([
    [{ isolation: 'snapshot' }, 'isolation'],
    [{ lockTimeout: -1 }, 'lockTimeout'],
    [{ statementTimeout: Number.NaN }, 'statementTimeout'],
    [{ idleInTransactionTimeout: Number.POSITIVE_INFINITY }, 'idleInTransactionTimeout'],
    [{ lockTimeout: 1.5 }, 'lockTimeout'],
    [{ lockTimeout: '2 fortnights' }, 'lockTimeout'],
    [{ deferrable: true }, 'deferrable'],
    [{ deferrable: true, isolation: 'serializable' }, 'deferrable'],
    [{ maxAttempts: 0 }, 'maxAttempts'],
    [{ retryOn: ['CommitOutcomeUnknown'] }, 'retryOn'],
    [{ backoff: { baseMs: 50, capMs: 10 } }, 'backoff'],
    [{ deadline: 0 }, 'deadline'],
    [{ propagation: 'supports' }, 'propagation'],
    [{ signal: {} }, 'signal'],
    [{ lockTimout: 100 }, ''],
  ])('rejects %j naming %s', (options, field) => {
    const result = parseTxOptions(options);
    expect(result.isErr()).toBe(true);
    const issue = result._unsafeUnwrapErr().issues[0];
    expect(String(issue?.path[0] ?? '')).toBe(field);
  });

  it('rejects non-object input', () => {
    for (const input of [null, 'serializable', 42, [], () => 1]) {
      expect(parseTxOptions(input).isErr() || input === null).toBe(true);
    }
  });

  it('merges per-call options over defaults (undefined keeps the default, backoff one level deep)', () => {
    expect(
      mergeTxOptions(
        { isolation: 'serializable', lockTimeout: '1s', backoff: { baseMs: 5, capMs: 500 } },
        { lockTimeout: undefined, statementTimeout: 100, backoff: { capMs: 50 } },
      ),
    ).toEqual({
      isolation: 'serializable',
      lockTimeout: '1s',
      statementTimeout: 100,
      backoff: { baseMs: 5, capMs: 50 },
    });
    const settings = parseTxOptions(
      { isolation: 'read committed' },
      { isolation: 'serializable', maxAttempts: 9 },
    );
    expect(settings._unsafeUnwrap()).toMatchObject({ isolation: 'read committed', maxAttempts: 9 });
  });
});

describe('durations', () => {
  it.each([
    [250, 250],
    [0, 0],
    ['500ms', 500],
    ['2s', 2000],
    ['1.5s', 1500],
    ['1m', 60_000],
    ['1min', 60_000],
    ['1h', 3_600_000],
    [' 3s ', 3000],
  ])('%j is %d ms', (input, ms) => {
    expect(durationSchema.parse(input)).toBe(ms);
  });

  it.each([
    -1,
    1.5,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    2 ** 31,
    '1.0001ms',
    '10',
    '5x',
    '-2s',
    '1e3ms',
    '',
  ])('refuses %j', (input) => {
    expect(durationSchema.safeParse(input).success).toBe(false);
  });
});
