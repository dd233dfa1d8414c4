import { err, ok, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { classifyOrRethrow, type DatabaseFailure } from '../errors/index.js';
import { type Db, inTransaction, type Queryable } from '../tx/types.js';

/**
 * Runs one statement on `db` and turns a database failure into a value. Anything `classify` does not
 * recognise (a bug, a TypeError) is a defect: the returned ResultAsync rejects with it unchanged.
 *
 * @example
 * const rows = await runQuery(pool, 'SELECT 1 AS one').map((r) => r.rows);
 */
export function runQuery<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: Db,
  text: string,
  values: readonly unknown[] = [],
): ResultAsync<pg.QueryResult<R>, DatabaseFailure> {
  return asResult((db as Queryable).query<R>(text, values));
}

/**
 * A driver promise as a value: a database failure is an `Err`, anything else (a defect) rejects
 * unchanged — unless the caller names what else it answers with as a value (`otherwise`: the queue's
 * `migrate()`, whose own refusal is an error of its own). {@link classifyOrRethrow} for the statements
 * the patterns and the queue run.
 *
 * @example
 * const res = await asResult(pool.query({ text: 'SELECT 1', rowMode: 'array' }));
 */
export function asResult<T, E = never>(
  promise: Promise<T>,
  otherwise?: (error: unknown) => E,
): ResultAsync<T, DatabaseFailure | E> {
  return new ResultAsync(
    promise.then(
      (value) => ok(value),
      (error: unknown) => err(classifyOrRethrow(error, { otherwise })),
    ),
  );
}

/**
 * Is `db` inside a transaction? {@link inTransaction} as a value: a database failure of the check (on
 * a pg older than 8.21 it asks the server) is an `Err`; a defect rejects unchanged.
 *
 * @example
 * const inTx = await checkInTransaction(client); // Ok(true) after BEGIN
 */
export function checkInTransaction(db: Db): ResultAsync<boolean, DatabaseFailure> {
  return asResult(inTransaction(db));
}
