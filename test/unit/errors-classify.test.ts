import { describe, expect, it } from 'vitest';
import {
  ConditionFailed,
  classify,
  DbError,
  isConnectionError,
  looksLikeDatabaseError,
  SerializationFailure,
  SQLSTATE,
  type UniqueViolation,
} from '../../src/errors/index.js';
import { isRetryable } from '../../src/tx/retryable.js';

/** What node-postgres' DatabaseError looks like (a server ErrorResponse). */
function serverError(code: string, fields: Record<string, string> = {}): Error {
  return Object.assign(new Error(fields.message ?? `error ${code}`), { severity: 'ERROR', code, ...fields });
}

describe('classify', () => {
  it.each(SQLSTATE.map((entry) => [entry.code, entry.kind] as const))(
    'maps SQLSTATE %s to %s',
    (code, kind) => {
      const failure = classify(serverError(code));
      expect(failure?.kind).toBe(kind);
    },
  );

  it('keeps the SQLSTATE table consistent with the one retry table', () => {
    const retried = SQLSTATE.filter((e) => isRetryable(classify(serverError(e.code)))).map((e) => e.code);
    expect(retried).toEqual(expect.arrayContaining(['40001', '40P01', '55P03', '57P01', '25006']));
    for (const code of ['40003', '23505', '23P01', '23503', '23514', '23502', '57014', '25P03']) {
      expect(retried).not.toContain(code);
    }
  });

  it('tells pg DatabaseErrors from look-alikes by their shape', () => {
    const real = Object.assign(new Error('x'), {
      severity: 'ERROR',
      code: '40001',
      length: 90,
      routine: 'r',
    });
    expect(looksLikeDatabaseError(real)).toBe(true);
    expect(looksLikeDatabaseError(Object.assign(new Error('x'), { code: '40001' }))).toBe(false);
    expect(looksLikeDatabaseError({ severity: 'ERROR', code: '40001', length: 1, routine: 'r' })).toBe(false);
  });

  it("maps pg's client-side query_timeout to QueryTimeout (never retried) and 25P03 to IdleInTransactionTimeout", () => {
    expect(classify(new Error('Query read timeout'))?.kind).toBe('QueryTimeout');
    expect(isRetryable(classify(new Error('Query read timeout')), ['QueryTimeout' as never])).toBe(false);
    expect(classify(serverError('25P03'))?.kind).toBe('IdleInTransactionTimeout');
  });

  it('carries constraint, table, schema, columns and detail of a 23505', () => {
    const failure = classify(
      serverError('23505', {
        constraint: 'users_email_key',
        table: 'users',
        schema: 'public',
        detail: 'Key (email)=(a@x.io) already exists.',
      }),
    ) as UniqueViolation;
    expect(failure.kind).toBe('UniqueViolation');
    expect(failure).toMatchObject({ constraint: 'users_email_key', table: 'users', schema: 'public' });
    expect(failure.columns).toEqual(['email']);
    expect(failure.detail).toMatch(/already exists/);
    expect(failure.message).toBe('unique constraint violated "users_email_key" on table "users"');
  });

  it('reads multi-column keys and quoted names from the detail', () => {
    const failure = classify(
      serverError('23P01', {
        constraint: 'bookings_no_overlap',
        detail:
          'Key ("room id", during)=(1, ["2030-01-01 10:00:00+00","2030-01-01 12:00:00+00")) conflicts with existing key',
      }),
    );
    expect(failure?.kind).toBe('ExclusionViolation');
    expect(failure?.kind === 'ExclusionViolation' && failure.columns).toEqual(['room id', 'during']);
  });

  it('keeps the driver error as cause', () => {
    const driver = serverError('40001');
    const failure = classify(driver);
    expect(failure).toBeInstanceOf(SerializationFailure);
    expect(failure?.cause).toBe(driver);
  });

  it('tells a statement timeout from a cancel (both 57014)', () => {
    const timeout = classify(
      serverError('57014', { message: 'canceling statement due to statement timeout' }),
    );
    const cancel = classify(serverError('57014', { message: 'canceling statement due to user request' }));
    expect(timeout?.kind === 'StatementTimeout' && timeout.reason).toBe('timeout');
    expect(cancel?.kind === 'StatementTimeout' && cancel.reason).toBe('cancel');
  });

  it('maps 40003 to CommitOutcomeUnknown, never to something retryable', () => {
    expect(classify(serverError('40003'))?.kind).toBe('CommitOutcomeUnknown');
  });

  it('maps socket errors and pg connection messages to ConnectionLost', () => {
    for (const code of ['ECONNRESET', 'EPIPE', 'ECONNREFUSED', 'ETIMEDOUT']) {
      const e = Object.assign(new Error(`read ${code}`), { code });
      expect(classify(e)?.kind).toBe('ConnectionLost');
      expect(isConnectionError(e)).toBe(true);
    }
    for (const message of [
      'Connection terminated unexpectedly',
      'Client has encountered a connection error and is not queryable',
      'Client was closed and is not queryable',
      'timeout expired', // pg.Client connectionTimeoutMillis
    ]) {
      expect(classify(new Error(message))?.kind).toBe('ConnectionLost');
    }
    expect(
      classify(serverError('57P01', { message: 'terminating connection due to administrator command' }))
        ?.kind,
    ).toBe('ConnectionLost');
  });

  it("maps pg-pool's connect timeout to PoolExhausted", () => {
    expect(classify(new Error('timeout exceeded when trying to connect'))?.kind).toBe('PoolExhausted');
  });

  it('maps any other server error to DbError with its code', () => {
    const failure = classify(serverError('42P01', { message: 'relation "nope" does not exist' }));
    expect(failure).toBeInstanceOf(DbError);
    expect(failure?.kind === 'DbError' && failure.code).toBe('42P01');
  });

  it('returns undefined for defects: programming errors, non-errors, non-database kit errors', () => {
    expect(classify(new TypeError('x is not a function'))).toBeUndefined();
    expect(classify(new Error('something else'))).toBeUndefined();
    expect(classify('a string')).toBeUndefined();
    expect(classify(undefined)).toBeUndefined();
    expect(classify(Object.assign(new Error('no severity'), { code: '42P01' }))).toBeUndefined();
    expect(classify(new ConditionFailed())).toBeUndefined();
  });

  it('passes an already classified database failure through unchanged', () => {
    const failure = new SerializationFailure();
    expect(classify(failure)).toBe(failure);
  });
});
