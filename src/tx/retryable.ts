import { CommitOutcomeUnknown, type DatabaseFailure, TxKitError } from '../errors/index.js';

/** How the retry engine treats one error kind. */
export interface RetryRule {
  /** Retried when `retryOn` is not given. */
  readonly byDefault: boolean;
  /** May be listed in `retryOn` at all. */
  readonly allowed: boolean;
  /** Why, in one line (for docs and reviews). */
  readonly why: string;
}

/**
 * THE table that decides "is this retryable?", by error kind: used by `tm.do` (outermost scope), by
 * `safeDdl`, by the patterns (a returned conflict) and by a queue handler's `ctx.transaction` (which
 * runs through `tm.do`). A retry re-runs the whole unit of work from a fresh BEGIN, so only kinds whose
 * attempt certainly had no effect may be retried, and only those whose cause a new attempt can fix are
 * retried by default.
 *
 * @example
 * RETRY_TABLE.SerializationFailure.byDefault; // true
 * RETRY_TABLE.CommitOutcomeUnknown.allowed; // false: never retried, not even when asked
 */
export const RETRY_TABLE = {
  SerializationFailure: {
    byDefault: true,
    allowed: true,
    why: '40001: lost a race under repeatable read / serializable; a fresh snapshot can win',
  },
  DeadlockDetected: {
    byDefault: true,
    allowed: true,
    why: '40P01: chosen as the deadlock victim; the other went on',
  },
  LockNotAvailable: {
    byDefault: true,
    allowed: true,
    why: '55P03: NOWAIT or lock_timeout gave up; the holder will finish',
  },
  ConnectionLost: {
    byDefault: true,
    allowed: true,
    why: 'lost before COMMIT was sent: the server rolled the transaction back',
  },
  ReadOnlyTransaction: {
    byDefault: true,
    allowed: true,
    why: '25006: a read-only server (standby, stale DNS after a failover) refused the write; it did nothing, and a new connection may reach the primary (never for a readOnly transaction)',
  },
  IdleInTransactionTimeout: {
    byDefault: false,
    allowed: true,
    why: '25P03: caused by a slow step inside the transaction; a retry repeats it',
  },
  StatementTimeout: { byDefault: false, allowed: true, why: '57014: the work may simply be too slow' },
  PoolExhausted: { byDefault: false, allowed: true, why: 'the pool had no client in time' },
  UniqueViolation: { byDefault: false, allowed: true, why: 'a domain answer, not a race' },
  ExclusionViolation: { byDefault: false, allowed: true, why: 'a domain answer, not a race' },
  ForeignKeyViolation: { byDefault: false, allowed: true, why: 'a domain answer, not a race' },
  CheckViolation: { byDefault: false, allowed: true, why: 'a domain answer, not a race' },
  NotNullViolation: { byDefault: false, allowed: true, why: 'a domain answer, not a race' },
  DbError: { byDefault: false, allowed: true, why: 'no known meaning' },
  CommitOutcomeUnknown: {
    byDefault: false,
    allowed: false,
    why: 'COMMIT may have happened: re-running could apply the work twice',
  },
  QueryTimeout: {
    byDefault: false,
    allowed: false,
    why: 'client-side query_timeout: the server may still be running the statement',
  },
} as const satisfies Record<DatabaseFailure['kind'], RetryRule>;

type Kind = keyof typeof RETRY_TABLE;
type KindsWhere<P extends 'byDefault' | 'allowed'> = {
  [K in Kind]: (typeof RETRY_TABLE)[K][P] extends true ? K : never;
}[Kind];

/** A kind that may appear in `retryOn`. */
export type RetryableKind = KindsWhere<'allowed'>;

const KINDS = Object.keys(RETRY_TABLE) as Kind[];

/** Every kind `retryOn` may list (CommitOutcomeUnknown and QueryTimeout are never retried). */
export const RETRYABLE_KINDS = KINDS.filter((k) => RETRY_TABLE[k].allowed) as [
  RetryableKind,
  ...RetryableKind[],
];

/** What is retried when `retryOn` is not given: 40001, 40P01, 55P03, a connection lost before COMMIT, 25006 from a read-only server. */
export const DEFAULT_RETRY_ON: readonly RetryableKind[] = KINDS.filter(
  (k) => RETRY_TABLE[k].byDefault,
) as RetryableKind[];

/**
 * Is `error` a failure worth another attempt, under `retryOn` (default {@link DEFAULT_RETRY_ON})? Only
 * pg-txkit's classified database failures can be: anything else (a user's error) never is.
 *
 * @example
 * isRetryable(new SerializationFailure()); // true
 * isRetryable(new IdleInTransactionTimeout()); // false (opt in with retryOn)
 * isRetryable(new LockNotAvailable(), ['DeadlockDetected']); // false
 */
export function isRetryable(error: unknown, retryOn: readonly string[] = DEFAULT_RETRY_ON): boolean {
  if (!(error instanceof TxKitError) || !Object.hasOwn(RETRY_TABLE, error.kind)) return false;
  return RETRY_TABLE[error.kind as Kind].allowed && retryOn.includes(error.kind);
}

/**
 * How the manager reads an error that COMMIT itself raised (`retryMode` of `new TxManager`):
 * - `'postgres'` (default): PostgreSQL answers COMMIT with an error only when it did NOT commit (a 40001
 *   of SSI, a deferred constraint): the error is classified like any other, and a 40001 is retried.
 * - `'commit-conflicts'`: for engines whose conflicts all surface as 40001 at COMMIT and whose commit
 *   is a distributed protocol — CockroachDB, Aurora DSQL (OC000 / OC001 are 40001), YugabyteDB. A 40001
 *   is retried as the whole transaction (each engine documents that it did not commit); 40003
 *   statement_completion_unknown ("result is ambiguous"), 08007 transaction_resolution_unknown and any
 *   internal error of class XX (XX000, CockroachDB's XXUUU, and its XXA00 "transaction committed but
 *   schema change aborted") raised by COMMIT are `CommitOutcomeUnknown`: never retried, the work may
 *   have been applied.
 * Connection failures during COMMIT are `CommitOutcomeUnknown` in both modes.
 */
export const RETRY_MODES = ['postgres', 'commit-conflicts'] as const;

/** One of {@link RETRY_MODES}. */
export type RetryMode = (typeof RETRY_MODES)[number];

/** SQLSTATEs that, raised by COMMIT under `'commit-conflicts'`, leave the outcome unknown. */
const AMBIGUOUS_AT_COMMIT = /^(40003|08007|XX...)$/;

/**
 * What a classified failure raised BY COMMIT means under `mode` (see {@link RETRY_MODES}): the failure
 * itself, or `CommitOutcomeUnknown` when the engine says the commit may have happened.
 *
 * @example
 * commitFailure(new DbError('XXA00', 'transaction committed but schema change aborted'), 'commit-conflicts'); // CommitOutcomeUnknown
 * commitFailure(new SerializationFailure(), 'commit-conflicts'); // the SerializationFailure: retried
 */
export function commitFailure(failure: DatabaseFailure, mode: RetryMode): DatabaseFailure {
  if (mode === 'postgres' || failure.kind === 'CommitOutcomeUnknown') return failure;
  const code = (failure as { code?: unknown }).code;
  if (typeof code === 'string' && AMBIGUOUS_AT_COMMIT.test(code)) {
    return new CommitOutcomeUnknown(failure.cause ?? failure);
  }
  return failure;
}
