import { errAsync, okAsync, type ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import type { DatabaseFailure, InvalidOptions } from '../errors/index.js';
import type { Db } from '../tx/types.js';
import { conflictClause, conflictTargetSchema, rowValuesSchema } from './insert-once.js';
import { parseOptions } from './parse-options.js';
import { runQuery } from './run-query.js';
import { columnNameSchema, quoteName, tableNameSchema } from './sql-identifier.js';

/** Column name of the "was inserted" flag added to RETURNING and removed from the row. */
const CREATED = 'pg_txkit_created';

const upsertOptionsSchema = z
  .object({
    /** The table, optionally schema-qualified. */
    table: tableNameSchema,
    /** Column → value of the row to insert. */
    values: rowValuesSchema,
    /** The unique key: its columns, or `{ constraint }`. */
    conflict: conflictTargetSchema,
    /**
     * What to change when the key exists: a list of columns to take from `values` (`SET c = EXCLUDED.c`),
     * or column → value. Default: every column of `values`.
     */
    update: z.union([z.array(columnNameSchema).min(1), rowValuesSchema]).optional(),
    /** Columns to return (default all). */
    returning: z.array(columnNameSchema).min(1).optional(),
  })
  .strict();

/** Options of {@link upsert}. */
export type UpsertOptions = z.input<typeof upsertOptionsSchema>;

/** The row after the upsert and whether it was inserted (true) or updated (false). */
export interface UpsertResult<R> {
  /** The row as it is now (inserted or updated), from `RETURNING`. */
  readonly row: R;
  /** True when the row was inserted, false when an existing one was updated. */
  readonly created: boolean;
}

/**
 * Inserts the row, or updates the existing row with the same unique key, in one statement:
 * `INSERT … ON CONFLICT (key) DO UPDATE SET … RETURNING *, (xmax = 0)`. `created` comes from the
 * new tuple's `xmax` (0 for a fresh insert, the locking transaction's id for an update). Atomic under
 * concurrency at read committed: a racer waits for the first inserter and then updates its row.
 *
 * Lock: ROW EXCLUSIVE on the table; on conflict the existing row is locked FOR UPDATE (ON CONFLICT DO
 * UPDATE always takes the strongest row lock) until the transaction ends.
 *
 * @example
 * const r = await upsert(db, {
 *   table: 'counters', values: { name: 'visits', n: 1 }, conflict: ['name'], update: { n: 0 },
 * });
 */
export function upsert<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: Db,
  options: UpsertOptions,
): ResultAsync<UpsertResult<R>, InvalidOptions | DatabaseFailure> {
  const parsed = parseOptions(upsertOptionsSchema, options);
  if (parsed.isErr()) return errAsync(parsed.error);
  const { table, values, conflict, update, returning } = parsed.value;
  const columns = Object.keys(values);
  const params: unknown[] = columns.map((c) => values[c]);
  let set: string;
  if (update === undefined || Array.isArray(update)) {
    // Deduplicated: `update: ['n', 'n']` would be "multiple assignments to same column" (42601) in
    // SQL we build (found by test/property/fuzz-patterns.test.ts).
    set = [...new Set(update ?? columns)].map((c) => `${quoteName(c)} = EXCLUDED.${quoteName(c)}`).join(', ');
  } else {
    set = Object.keys(update)
      .map((c) => {
        params.push(update[c]);
        return `${quoteName(c)} = $${params.length}`;
      })
      .join(', ');
  }
  const ret = returning === undefined ? '*' : returning.map((c) => quoteName(c)).join(', ');
  // Lock: ROW EXCLUSIVE on the table; FOR UPDATE on the conflicting row when it updates.
  const text = `INSERT INTO ${quoteName(table)} (${columns.map((c) => quoteName(c)).join(', ')})
    VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')}) ${conflictClause(conflict)}
    DO UPDATE SET ${set} RETURNING ${ret}, (xmax = 0) AS ${CREATED}`;
  return runQuery<R & Record<typeof CREATED, boolean>>(db, text, params).andThen((result) => {
    const first = result.rows[0];
    if (first === undefined) throw new Error('upsert: INSERT … ON CONFLICT DO UPDATE returned no row');
    const { [CREATED]: created, ...row } = first;
    return okAsync({ row: row as unknown as R, created });
  });
}
