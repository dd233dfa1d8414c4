import { errAsync, okAsync, type ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import { type DatabaseFailure, type InvalidOptions, NotInTransaction } from '../errors/index.js';
import type { Db } from '../tx/types.js';
import { parseOptions } from './parse-options.js';
import { checkInTransaction, runQuery } from './run-query.js';
import { columnNameSchema, quoteName, tableNameSchema } from './sql-identifier.js';

/** Row lock strengths, weakest last. */
const LOCK_CLAUSE = {
  'no key update': 'FOR NO KEY UPDATE',
  update: 'FOR UPDATE',
  share: 'FOR SHARE',
  'key share': 'FOR KEY SHARE',
} as const;

const WAIT_CLAUSE = { block: '', nowait: ' NOWAIT', skipLocked: ' SKIP LOCKED' } as const;

/**
 * A key value. PostgreSQL text cannot hold NUL (U+0000): such an id would fail the statement with 22021
 * inside the caller's transaction (aborting it); refused up front instead.
 */
const idSchema = z.union([
  z
    .string()
    .refine((s) => !s.includes('\u0000'), 'must not contain NUL (U+0000): PostgreSQL cannot store it'),
  z.number().finite(),
  z.bigint(),
]);

/**
 * The extra column the locking statement returns: the 1-based positions in the requested array of the
 * ids equal to the row's key, compared by PostgreSQL in the key column's type (so an upper-case uuid or
 * '01' for an int matches its row). Removed from the rows before they are returned.
 */
const POSITIONS = 'pg_txkit_requested_positions';

const lockRowsOptionsSchema = z
  .object({
    /** The table, optionally schema-qualified. */
    table: tableNameSchema,
    /** The key column the ids refer to (unique): default 'id'. Rows are locked in its order. */
    key: columnNameSchema.default('id'),
    /** The ids to lock (any order, duplicates allowed): 1 to 10 000 of them. */
    ids: z.array(idSchema).min(1).max(10_000),
    /**
     * - 'no key update' (default): to read then update non-key columns. Does not block foreign-key
     *   checks (FOR KEY SHARE) of rows inserted into child tables.
     * - 'update': when you will DELETE the rows or change a unique/primary key column.
     * - 'share': keep the rows unchanged while you read them (blocks writers, not other sharers).
     * - 'key share': only forbid DELETE and key changes (what a foreign-key check takes).
     */
    mode: z.enum(['no key update', 'update', 'share', 'key share']).default('no key update'),
    /**
     * - 'block' (default): wait for the holders (bounded by the transaction's lock_timeout).
     * - 'nowait': fail at once with `LockNotAvailable` (55P03) if any row is locked.
     * - 'skipLocked': return only the rows free now; locked ones are reported in `missing` (queues only:
     *   the view is deliberately inconsistent).
     */
    wait: z.enum(['block', 'nowait', 'skipLocked']).default('block'),
    /** Columns to return (default all). The key column is always included. */
    columns: z.array(columnNameSchema).min(1).optional(),
  })
  .strict();

/** Options of {@link lockRows}. */
export type LockRowsOptions = z.input<typeof lockRowsOptionsSchema>;

/** What {@link lockRows} returns. */
export interface LockedRows<R> {
  /** The locked rows, in ascending key order. */
  readonly rows: R[];
  /** Requested ids with no row returned: absent, or (with `skipLocked`) locked by someone else. */
  readonly missing: (string | number | bigint)[];
}

/**
 * Locks rows by key, in ONE statement, in ascending key order, and returns them:
 *
 * ```sql
 * SELECT … FROM t WHERE key = ANY($1) ORDER BY key FOR NO KEY UPDATE [NOWAIT | SKIP LOCKED]
 * ```
 *
 * Why the order is real: PostgreSQL locks rows in the LockRows plan node, which sits ABOVE the Sort
 * (or the ordered index scan) — it locks each row as the ordered stream reaches it. So two
 * transactions that lock overlapping id sets both acquire them lowest key first, and a transfer A→B
 * and a transfer B→A can never hold one row each while waiting for the other: no deadlock (40P01).
 * (Locking one row per statement in the caller's order is what deadlocks.) A row updated by someone
 * else while we wait is re-read (EvalPlanQual) and still locked in place.
 *
 * Locks last until the transaction ends, so `db` must be in a transaction (`tm.db()` inside
 * `tm.do`, a Tx, or a client after BEGIN); otherwise `NotInTransaction` and nothing is sent: in
 * autocommit the lock would end with the statement and protect nothing. Ids are a parameter;
 * table/key/columns are validated identifiers and quoted (`InvalidOptions` before any SQL otherwise).
 * A row that does not exist cannot be locked: to stop a concurrent insert, use a unique index.
 *
 * @example
 * await tm.do(async (tx) => {
 *   const locked = await lockRows<{ id: number; balance: number }>(tx, { table: 'wallets', ids: [to, from] });
 *   if (locked.isErr()) return err(locked.error);
 *   // both rows are ours until COMMIT: read, decide, write
 * });
 */
export function lockRows<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: Db,
  options: LockRowsOptions,
): ResultAsync<LockedRows<R>, InvalidOptions | NotInTransaction | DatabaseFailure> {
  const parsed = parseOptions(lockRowsOptionsSchema, options);
  if (parsed.isErr()) return errAsync(parsed.error);
  const { table, key, ids, mode, wait, columns } = parsed.value;
  const unique = [...new Map(ids.map((id) => [String(id), id])).values()];
  const select =
    columns === undefined ? '*' : [...new Set([key, ...columns])].map((c) => quoteName(c)).join(', ');
  const k = quoteName(key);
  // Lock: the requested row lock mode on exactly the rows with these keys, taken in key order by the
  // LockRows node above the ORDER BY (see the doc comment); held until COMMIT/ROLLBACK.
  // array_positions($1, key) also fixes $1's type as the key column's array type (the target list is
  // analysed before WHERE), so `key = ANY($1)` and the positions both compare in that type.
  const text = `SELECT ${select}, array_positions($1, ${k}) AS ${POSITIONS} FROM ${quoteName(table)} WHERE ${k} = ANY($1) ORDER BY ${k} ${LOCK_CLAUSE[mode]}${WAIT_CLAUSE[wait]}`;
  return checkInTransaction(db)
    .andThen((inTx) =>
      inTx
        ? runQuery<R & Record<typeof POSITIONS, number[] | null>>(db, text, [
            unique.map((id) => (typeof id === 'bigint' ? id.toString() : id)),
          ])
        : errAsync(new NotInTransaction('lockRows')),
    )
    .andThen((result) => {
      const found = new Set<number>();
      const rows = result.rows.map((withPositions) => {
        const { [POSITIONS]: positions, ...row } = withPositions;
        for (const p of positions ?? []) found.add(p);
        return row as unknown as R;
      });
      return okAsync({ rows, missing: unique.filter((_, i) => !found.has(i + 1)) });
    });
}
