import { err, errAsync, ok, type ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import { ConditionFailed, type DatabaseFailure, type InvalidOptions, NotFound } from '../errors/index.js';
import type { Db } from '../tx/types.js';
import { parseOptions } from './parse-options.js';
import { runQuery } from './run-query.js';
import { columnNameSchema, quoteName, tableNameSchema } from './sql-identifier.js';

/**
 * A statement with its parameters: pg's `{ text, values }`, or a query builder's compiled query as the
 * builder gives it — Kysely's `.compile()` (`{ sql, parameters }`), drizzle's `.toSQL()`
 * (`{ sql, params }`), Knex's `.toSQL().toNative()` (`{ sql, bindings }`).
 */
export type ConditionalQuery =
  | {
      /** The statement: the action and its condition, e.g. `UPDATE stock SET left = left - $2 WHERE id = $1 AND left >= $2`. */
      readonly text: string;
      /** Its parameters ($1, $2 …). */
      readonly values?: readonly unknown[];
    }
  | { readonly sql: string; readonly parameters: readonly unknown[] }
  | { readonly sql: string; readonly params: readonly unknown[] }
  | { readonly sql: string; readonly bindings: readonly unknown[] };

const keyValueSchema = z.union([z.string(), z.number().finite(), z.bigint()]);

const updateWhereOptionsSchema = z
  .object({
    /**
     * 'one' (default): exactly one row must match. 0 rows → `ConditionFailed` (or `NotFound`); more than
     * one row is a defect (a bug in the WHERE clause) and throws.
     * 'some': at least one row must match; 0 rows → `ConditionFailed` (or `NotFound`).
     */
    expect: z.enum(['one', 'some']).default('one'),
    /**
     * When 0 rows matched, read `SELECT 1 FROM table WHERE key = id` to tell a missing row (`NotFound`)
     * from a condition that no longer holds (`ConditionFailed`). Costs one extra read on failure only.
     */
    notFound: z
      .object({ table: tableNameSchema, key: columnNameSchema.default('id'), id: keyValueSchema })
      .strict()
      .optional(),
  })
  .strict();

/** Options of {@link updateWhere}. */
export type UpdateWhereOptions = z.input<typeof updateWhereOptionsSchema>;

const statementSchema = z.string().trim().min(1, 'the statement is empty');
const querySchema = z.union([
  z.object({ text: statementSchema, values: z.array(z.unknown()).optional() }).loose(),
  z
    .object({ sql: statementSchema, parameters: z.array(z.unknown()) })
    .loose()
    .transform((q) => ({ text: q.sql, values: q.parameters })),
  z
    .object({ sql: statementSchema, params: z.array(z.unknown()) })
    .loose()
    .transform((q) => ({ text: q.sql, values: q.params })),
  z
    .object({ sql: statementSchema, bindings: z.array(z.unknown()) })
    .loose()
    .transform((q) => ({ text: q.sql, values: q.bindings })),
]);

/**
 * Runs a conditional statement — the action AND its condition in one statement, e.g.
 * `UPDATE stock SET left = left - $2 WHERE id = $1 AND left >= $2` — and checks how many rows it
 * changed. The condition is re-checked by PostgreSQL on the newest row version: at read committed an
 * UPDATE blocked by another transaction waits, then re-evaluates its WHERE on the committed row and
 * changes 0 rows if it no longer holds. So "0 rows" is never a silent success: it is
 * `ConditionFailed` (seat taken, stock short, stale `version`), or `NotFound` when `notFound` is given
 * and the row does not exist. Use `RETURNING` to get the changed rows back.
 *
 * Lock: the statement's own (an UPDATE takes FOR NO KEY UPDATE on the rows it changes, or FOR UPDATE
 * when it changes a key column), held to the end of the transaction. At repeatable read/serializable
 * the same conflict is a `SerializationFailure` (40001) instead: let `tm.do` retry it.
 *
 * `expect: 'one'` with more than one changed row throws (a defect: the WHERE does not pin one row);
 * inside `tm.do` the throw rolls the change back, in autocommit it is already applied.
 *
 * @example
 * const sold = await updateWhere(tm.db(), {
 *   text: 'UPDATE stock SET left_units = left_units - $2 WHERE sku = $1 AND left_units >= $2 RETURNING left_units',
 *   values: ['apple', 3],
 * }, { notFound: { table: 'stock', key: 'sku', id: 'apple' } });
 * if (sold.isErr()) console.log(sold.error.kind); // 'ConditionFailed' | 'NotFound' | a database failure
 *
 * @example A query builder's compiled query (Kysely)
 * await updateWhere(tm.db(), db.updateTable('stock').set((eb) => ({ left_units: eb('left_units', '-', 3) }))
 *   .where('sku', '=', 'apple').where('left_units', '>=', 3).compile());
 *
 * @example Optimistic versioning
 * await updateWhere(db, {
 *   text: 'UPDATE docs SET body = $3, version = version + 1 WHERE id = $1 AND version = $2 RETURNING version',
 *   values: [id, readVersion, body],
 * });
 */
export function updateWhere<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: Db,
  query: ConditionalQuery,
  options: UpdateWhereOptions = {},
): ResultAsync<R[], ConditionFailed | NotFound | InvalidOptions | DatabaseFailure> {
  const parsedQuery = parseOptions(querySchema, query);
  if (parsedQuery.isErr()) return errAsync(parsedQuery.error);
  const parsed = parseOptions(updateWhereOptionsSchema, options);
  if (parsed.isErr()) return errAsync(parsed.error);
  const { expect, notFound } = parsed.value;
  return runQuery<R>(db, parsedQuery.value.text, parsedQuery.value.values ?? []).andThen((result) => {
    const count = result.rowCount ?? 0;
    if (count === 0) {
      if (notFound === undefined) return errAsync(new ConditionFailed(0));
      // A plain read (no lock): it only tells "absent" from "present but the condition failed".
      return runQuery(
        db,
        `SELECT 1 FROM ${quoteName(notFound.table)} WHERE ${quoteName(notFound.key)} = $1 LIMIT 1`,
        [typeof notFound.id === 'bigint' ? notFound.id.toString() : notFound.id],
      ).andThen((found) =>
        err(
          (found.rowCount ?? 0) === 0 ? new NotFound(notFound.table, [notFound.id]) : new ConditionFailed(0),
        ),
      );
    }
    if (expect === 'one' && count > 1) {
      throw new Error(
        `updateWhere(expect: 'one') changed ${count} rows: the WHERE clause does not identify one row (a bug in the query)`,
      );
    }
    return ok(result.rows);
  });
}
