import { errAsync, okAsync, type ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import { type DatabaseFailure, type InvalidOptions, SerializationFailure } from '../errors/index.js';
import type { Db } from '../tx/types.js';
import { invalid, parseOptions } from './parse-options.js';
import { runQuery } from './run-query.js';
import { columnNameSchema, columnValuesSchema, quoteName, tableNameSchema } from './sql-identifier.js';

/** How many times insertOnce tries "insert, else read" when the conflicting row keeps vanishing. */
const MAX_ROUNDS = 5;

/** zod schema of the conflict target shared by insertOnce and upsert. */
export const conflictTargetSchema = z.union([
  z.array(columnNameSchema).min(1),
  z.object({ constraint: columnNameSchema }).strict(),
]);

/** The values of a row to insert: column → value (values are always sent as parameters). */
export const rowValuesSchema = columnValuesSchema.refine(
  (v) => Object.keys(v).length > 0,
  'at least one column is needed',
);

const insertOnceOptionsSchema = z
  .object({
    /** The table, optionally schema-qualified. */
    table: tableNameSchema,
    /** Column → value of the new row. */
    values: rowValuesSchema,
    /**
     * The unique key that defines "the same row": its columns (a unique index or constraint must exist
     * on exactly them) or `{ constraint }` (a unique/primary key constraint's name).
     */
    conflict: conflictTargetSchema,
    /** Columns to return (default all). */
    returning: z.array(columnNameSchema).min(1).optional(),
  })
  .strict()
  // Own keys only (found by test/property/fuzz-patterns.test.ts): with `c in o.values`, conflict
  // ['toString'] passed validation through Object.prototype and reached SQL.
  .refine((o) => !Array.isArray(o.conflict) || o.conflict.every((c) => Object.hasOwn(o.values, c)), {
    message: 'every conflict column needs a value (it is how the existing row is found)',
    path: ['conflict'],
  });

/** Options of {@link insertOnce}. */
export type InsertOnceOptions = z.input<typeof insertOnceOptionsSchema>;

/** The row and whether this call created it. */
export interface InsertOnceResult<R> {
  /** The new row, or the one that already had this key. */
  readonly row: R;
  /** True if this call inserted it. */
  readonly created: boolean;
}

/**
 * The columns of a conflict target (for `{ constraint }`, read from the catalog). A name that is not a
 * unique or primary key constraint of the table (an exclusion constraint: `ON CONFLICT … DO NOTHING`
 * accepts it, but it has no key to find "the same row" by) is `InvalidOptions`.
 */
export function conflictColumns(
  db: Db,
  table: string,
  conflict: z.output<typeof conflictTargetSchema>,
): ResultAsync<string[], InvalidOptions | DatabaseFailure> {
  if (Array.isArray(conflict)) return okAsync(conflict);
  // Catalog read, no lock beyond the catalogs' ACCESS SHARE.
  return runQuery<{ attname: string }>(
    db,
    `SELECT a.attname FROM pg_constraint c
       JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) ON true
       JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
      WHERE c.conname = $1 AND c.conrelid = $2::regclass AND c.contype IN ('u', 'p')
      ORDER BY k.n`,
    [conflict.constraint, quoteName(table)],
  ).andThen((r) =>
    r.rows.length === 0
      ? errAsync(
          invalid(
            ['conflict', 'constraint'],
            `"${conflict.constraint}" is not a unique or primary key constraint of ${table}`,
          ),
        )
      : okAsync(r.rows.map((row) => row.attname)),
  );
}

/** `ON CONFLICT (a, b)` or `ON CONFLICT ON CONSTRAINT c`. */
export function conflictClause(conflict: z.output<typeof conflictTargetSchema>): string {
  return Array.isArray(conflict)
    ? `ON CONFLICT (${conflict.map((c) => quoteName(c)).join(', ')})`
    : `ON CONFLICT ON CONSTRAINT ${quoteName(conflict.constraint)}`;
}

/**
 * Inserts a row unless one with the same unique key exists, and returns the row either way:
 * `{ row, created }`. The unique index decides, so it is correct under any concurrency: when two
 * callers race with the same key, exactly one gets `created: true` and both get the same row.
 *
 * How: `INSERT … ON CONFLICT (key) DO NOTHING RETURNING *`; if nothing came back, read the existing
 * row by its key. At read committed the INSERT waits for a concurrent uncommitted inserter of the same
 * key, then sees its row committed (→ read it) or rolled back (→ inserted). If the existing row was
 * deleted between the two statements the pair is tried again (at most 5 rounds; then a retryable
 * `SerializationFailure`). At repeatable read/serializable a conflicting row our snapshot cannot see
 * is a 40001 `SerializationFailure` from PostgreSQL: `tm.do` retries it.
 *
 * Lock: the INSERT takes ROW EXCLUSIVE on the table and, on conflict, waits on the other inserter's
 * transaction (the unique index entry), not on a row lock; the read takes none.
 *
 * @example
 * const r = await insertOnce(tm.db(), {
 *   table: 'users', values: { email: 'a@example.com', name: 'Ann' }, conflict: ['email'],
 * });
 * if (r.isOk() && !r.value.created) console.log('already registered', r.value.row);
 */
export function insertOnce<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: Db,
  options: InsertOnceOptions,
): ResultAsync<InsertOnceResult<R>, InvalidOptions | DatabaseFailure> {
  const parsed = parseOptions(insertOnceOptionsSchema, options);
  if (parsed.isErr()) return errAsync(parsed.error);
  const { table, values, conflict, returning } = parsed.value;
  const columns = Object.keys(values);
  const params = columns.map((c) => values[c]);
  const ret = returning === undefined ? '*' : returning.map((c) => quoteName(c)).join(', ');
  const t = quoteName(table);
  // Lock: ROW EXCLUSIVE on the table; on a key conflict waits for the other inserter's transaction.
  const insert = `INSERT INTO ${t} (${columns.map((c) => quoteName(c)).join(', ')})
    VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')}) ${conflictClause(conflict)} DO NOTHING RETURNING ${ret}`;

  const round = (n: number, keyColumns: string[]): ResultAsync<InsertOnceResult<R>, DatabaseFailure> =>
    runQuery<R>(db, insert, params).andThen((inserted) => {
      const row = inserted.rows[0];
      if (row !== undefined) return okAsync({ row, created: true });
      // Plain read of the winner by its unique key (no lock: the unique index keeps it unique).
      const where = keyColumns.map((c, i) => `${quoteName(c)} IS NOT DISTINCT FROM $${i + 1}`).join(' AND ');
      return runQuery<R>(
        db,
        `SELECT ${ret} FROM ${t} WHERE ${where} LIMIT 1`,
        keyColumns.map((c) => values[c]),
      ).andThen((existing) => {
        const found = existing.rows[0];
        if (found !== undefined) return okAsync({ row: found, created: false });
        if (n >= MAX_ROUNDS) return errAsync(new SerializationFailure());
        return round(n + 1, keyColumns); // deleted meanwhile: try the insert again
      });
    });
  // The key columns are known before anything is inserted (for `{ constraint }` one catalog read), so a
  // target that cannot find "the same row" is refused up front, not on the first real duplicate.
  return conflictColumns(db, table, conflict).andThen((cols) => {
    // Own keys only: `in` would accept 'toString' or 'constructor' through Object.prototype.
    const missing = cols.filter((c) => !Object.hasOwn(values, c));
    if (missing.length > 0) {
      return errAsync(
        invalid(
          ['values'],
          `the conflict key's column(s) ${missing.join(', ')} need a value (a DEFAULT filled in by the server cannot be used to find the existing row)`,
        ),
      );
    }
    return round(1, cols);
  });
}
