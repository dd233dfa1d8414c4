import { ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { classify } from '../../errors/classify.js';
import type { DatabaseFailure } from '../../errors/errors.js';
import type { Db, Queryable } from '../../tx/types.js';
import { RAW_TEXT } from '../job.js';

/** Maps a driver error to the taxonomy; anything that is not a database failure is a defect: rethrown. */
export function dbError(e: unknown): DatabaseFailure {
  const failure = classify(e);
  if (failure === undefined) throw e;
  return failure as DatabaseFailure;
}

/**
 * Runs one of the queue's statements on `db` (a transaction or the pool); a driver error comes back as
 * its {@link DatabaseFailure}, anything else is rethrown.
 *
 * @example
 * const res = await runStatement<{ id: string }>(pool, sql.cancel, ['42']);
 */
export function runStatement<R extends pg.QueryResultRow>(
  db: Db,
  text: string,
  values: readonly unknown[],
): ResultAsync<pg.QueryResult<R>, DatabaseFailure> {
  return ResultAsync.fromPromise((db as Queryable).query<R>(text, values), dbError);
}

/**
 * As {@link runStatement}, with the rows as arrays of the server's text (`rowMode: 'array'`,
 * {@link RAW_TEXT}): the caller converts the values itself (the claim's `jobsFromClaim`).
 *
 * @example
 * const res = await runTuples<ClaimedRow>(pool, sql.claim, [10, 30_000, ['email']]);
 */
export function runTuples<R extends unknown[]>(
  pool: pg.Pool,
  text: string,
  values: readonly unknown[],
): ResultAsync<pg.QueryArrayResult<R>, DatabaseFailure> {
  const query = pool.query<R>({ text, values: [...values], rowMode: 'array', types: RAW_TEXT });
  return ResultAsync.fromPromise(query, dbError);
}
