import { describe, expect, it } from 'vitest';
import {
  type ClassifyRules,
  ConditionFailed,
  ConnectionLost,
  classify,
  classifyOrRethrow,
  type DatabaseFailure,
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

/** pg's DatabaseError exactly as node-postgres builds it (the protocol fields included). */
function pgError(code: string, message = `error ${code}`): Error {
  return Object.assign(new Error(message), { severity: 'ERROR', code, length: 90, routine: 'r' });
}

/** A query builder's error around pg's, as Kysely, drizzle and Knex users see it. */
function wrapped(inner: unknown, links = 1): Error {
  let error = inner;
  for (let i = 0; i < links; i++) error = new Error(`Failed query (${i})`, { cause: error });
  return error as Error;
}

const socketError = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
const lookAlike = Object.assign(new Error('my own 40001'), { code: '40001' });
const defect = new TypeError('x is not a function');
const serialization = pgError('40001');
const unique = pgError('23505');
const own = new ConnectionLost(undefined, socketError);
const recorded = new SerializationFailure(serialization);
const loop: Error & { cause?: unknown } = new Error('cyclic');
loop.cause = wrapped(loop);

/** The errors pg raised for "this attempt's queries" in the rows that use the transaction's rule. */
const raised = new Set<object>([serialization, unique, socketError]);
const txRules: ClassifyRules<never> = { raisedByDriver: raised };

type Expected =
  | { readonly kind: DatabaseFailure['kind']; readonly cause?: unknown; readonly same?: DatabaseFailure }
  | 'rethrown';

describe('classifyOrRethrow', () => {
  const rows: [string, unknown, ClassifyRules<never> | undefined, Expected][] = [
    // Straight from the driver (a query's or connect()'s rejection): whatever classify recognises.
    ['driver error with its SQLSTATE', unique, undefined, { kind: 'UniqueViolation', cause: unique }],
    ['socket error of a query', socketError, undefined, { kind: 'ConnectionLost', cause: socketError }],
    ['a TypeError (a defect)', defect, undefined, 'rethrown'],
    ['a thrown string', 'boom', undefined, 'rethrown'],
    ["pg-txkit's own database failure", own, undefined, { kind: 'ConnectionLost', same: own }],
    ["pg-txkit's error of another kind", new ConditionFailed(), undefined, 'rethrown'],
    ['a wrapper without fields of its own', wrapped(unique), undefined, 'rethrown'],
    // Through a user's callback: the transaction's rule (only what pg raised for these queries).
    [
      'driver error of these queries',
      serialization,
      txRules,
      { kind: 'SerializationFailure', cause: serialization },
    ],
    ["pg's DatabaseError of another connection", pgError('23503'), txRules, { kind: 'ForeignKeyViolation' }],
    [
      'builder-wrapped driver error (cause)',
      wrapped(unique),
      txRules,
      { kind: 'UniqueViolation', cause: unique },
    ],
    [
      'builder-wrapped socket error of these queries',
      wrapped(socketError),
      txRules,
      { kind: 'ConnectionLost' },
    ],
    ['wrapped 8 links deep', wrapped(serialization, 8), txRules, { kind: 'SerializationFailure' }],
    ['wrapped 9 links deep (past the limit)', wrapped(serialization, 9), txRules, 'rethrown'],
    ['a cause chain that loops', loop, txRules, 'rethrown'],
    ["a wrapper around another connection's error", wrapped(pgError('40001')), txRules, 'rethrown'],
    [
      "the callback's own socket error",
      Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
      txRules,
      'rethrown',
    ],
    ['a plain error with a SQLSTATE-like code', lookAlike, txRules, 'rethrown'],
    ['a TypeError (a defect) in a callback', defect, txRules, 'rethrown'],
    ["pg-txkit's own database failure in a callback", own, txRules, { kind: 'ConnectionLost', same: own }],
  ];

  it.each(rows)('%s', (_, error, rules, expected) => {
    const run = () => (rules === undefined ? classifyOrRethrow(error) : classifyOrRethrow(error, rules));
    if (expected === 'rethrown') {
      let thrown: unknown;
      try {
        run();
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBe(error);
      return;
    }
    const failure = run();
    expect(failure.kind).toBe(expected.kind);
    if (expected.cause !== undefined) expect(failure.cause).toBe(expected.cause);
    if (expected.same !== undefined) expect(failure).toBe(expected.same);
  });

  it('answers with `otherwise` instead of rethrowing, and only for what is not a database failure', () => {
    const otherwise = (error: unknown) => ({ notDatabase: error });
    expect(classifyOrRethrow(defect, { otherwise })).toEqual({ notDatabase: defect });
    expect(classifyOrRethrow(lookAlike, { raisedByDriver: raised, otherwise })).toEqual({
      notDatabase: lookAlike,
    });
    expect(classifyOrRethrow(unique, { otherwise })).toMatchObject({ kind: 'UniqueViolation' });
  });

  it("takes the failure an error replaces only for an object that is not pg-txkit's own", () => {
    const rules = { raisedByDriver: raised, replacing: () => recorded, otherwise: () => undefined };
    // A builder that converts pg's error without a cause (as Prisma does): the recorded failure decides.
    expect(classifyOrRethrow(new Error('Invalid `prisma.user.create()` invocation'), rules)).toBe(recorded);
    // pg-txkit's own errors decide by their kind alone; a thrown string is the user's value.
    expect(classifyOrRethrow(new ConditionFailed(), rules)).toBeUndefined();
    expect(classifyOrRethrow('boom', rules)).toBeUndefined();
    // A driver error of these queries is itself, not the recorded one.
    expect(classifyOrRethrow(wrapped(unique), rules)?.kind).toBe('UniqueViolation');
    // Without the transaction's rule, nothing is replaced: a lenient classify decides.
    expect(() => classifyOrRethrow(new Error('converted'), { replacing: () => recorded })).toThrow(
      'converted',
    );
  });
});
