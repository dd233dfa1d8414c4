import type { ResultAsync } from 'neverthrow';
import type pg from 'pg';
import type { DatabaseFailure } from '../../errors/errors.js';
import { asResult, runQuery } from '../../patterns/run-query.js';
import type { Db } from '../../tx/types.js';
import { RAW_TEXT } from '../job.js';

/**
 * Runs one of the queue's statements on `db` (a transaction or the pool); a driver error comes back as
 * its {@link DatabaseFailure}, anything else rejects unchanged (`runQuery`'s classify-or-rethrow).
 *
 * @example
 * const res = await runStatement<{ id: string }>(pool, sql.cancel, ['42']);
 */
export function runStatement<R extends pg.QueryResultRow>(
  db: Db,
  text: string,
  values: readonly unknown[],
): ResultAsync<pg.QueryResult<R>, DatabaseFailure> {
  return runQuery<R>(db, text, values);
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
  return asResult(pool.query<R>({ text, values: [...values], rowMode: 'array', types: RAW_TEXT }));
}
