import { describe, expect, it } from 'vitest';
import { beginSql } from '../../src/tx/begin-sql.js';

const base = { isolation: 'read committed', readOnly: false, deferrable: false } as const;

describe('beginSql', () => {
  it('builds the isolation level, access mode and DEFERRABLE', () => {
    expect(beginSql(base)).toBe('BEGIN ISOLATION LEVEL READ COMMITTED');
    expect(beginSql({ ...base, isolation: 'repeatable read', readOnly: true })).toBe(
      'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
    );
    expect(beginSql({ isolation: 'serializable', readOnly: true, deferrable: true })).toBe(
      'BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE',
    );
  });

  it('puts every SET LOCAL in the same text (one round trip), in a fixed order', () => {
    expect(
      beginSql({
        ...base,
        isolation: 'serializable',
        lockTimeout: 500,
        statementTimeout: 2000,
        idleInTransactionTimeout: 1,
      }),
    ).toBe(
      'BEGIN ISOLATION LEVEL SERIALIZABLE; SET LOCAL lock_timeout = 500; SET LOCAL statement_timeout = 2000; ' +
        'SET LOCAL idle_in_transaction_session_timeout = 1',
    );
    expect(beginSql({ ...base, statementTimeout: 10 })).toBe(
      'BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = 10',
    );
  });

  it('refuses anything that is not an integer number of milliseconds (a bug, never SQL)', () => {
    for (const bad of [1.5, -1, 0, Number.NaN, 2 ** 31, '100; DROP TABLE x' as unknown as number]) {
      expect(() => beginSql({ ...base, lockTimeout: bad })).toThrow(TypeError);
    }
    expect(() => beginSql({ ...base, isolation: 'snapshot' as never })).toThrow(TypeError);
  });
});
