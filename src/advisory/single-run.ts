import { err, errAsync, ok, type Result, type ResultAsync } from 'neverthrow';
import pg from 'pg';
import { z } from 'zod/v4';
import {
  AlreadyDone,
  type DatabaseFailure,
  type InvalidOptions,
  type LockBusy,
  type TxError,
} from '../errors/index.js';
import { runMigration } from '../patterns/run-migration.js';
import { decodeStoredResult, encodeStoredResult } from '../patterns/stored-result.js';
import type { TxManager } from '../tx/tx-manager.js';
import type { ConstraintErrors } from '../tx/tx-manager-options.js';
import type { TxOptions } from '../tx/tx-options.js';
import type { Queryable, Tx } from '../tx/types.js';
import { advisoryKey } from './advisory-key.js';
import { parseOptions } from './parse-options.js';
import { acquireXactLocks, type LockedCallback, toResult } from './with-advisory-lock.js';

/** Default table of {@link singleRun}. */
export const SINGLE_RUN_TABLE = 'pg_txkit_single_run';

const tableSchema = z
  .string()
  .regex(
    /^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$/,
    'a table name, optionally schema-qualified',
  )
  .default(SINGLE_RUN_TABLE);

/**
 * PostgreSQL `text` cannot hold NUL (U+0000): such a name or key would fail the INSERT with 22021 after
 * `fn` ran; refused as InvalidOptions up front instead (found by test/property/fuzz-advisory).
 */
const noNul = (s: string): boolean => !s.includes('\u0000');
const NO_NUL = 'must not contain NUL (U+0000): PostgreSQL text cannot store it';

const singleRunSpecSchema = z
  .object({
    /** The job ('daily-post'). */
    name: z.string().min(1).max(200).refine(noNul, NO_NUL),
    /** The occurrence of the job that must happen at most once ('2026-11-30', an order id …). */
    key: z.string().min(1).max(500).refine(noNul, NO_NUL),
    /** The record table (created by {@link migrateSingleRun}); default `pg_txkit_single_run`. */
    table: tableSchema,
    /** Options for the `tm.do` transaction (isolation, propagation, name, maxAttempts …). */
    tx: z.custom<TxOptions>((v) => typeof v === 'object' && v !== null).optional(),
  })
  .strict();

/** What {@link singleRun} runs: the job name, the occurrence key and where runs are recorded. */
export type SingleRunSpec = z.input<typeof singleRunSpecSchema>;

/** Errors {@link singleRun} adds to those of `fn` and of the transaction. */
export type SingleRunError = AlreadyDone<unknown> | LockBusy | InvalidOptions;

/** Quotes a possibly schema-qualified table name for SQL. */
function quoteTable(table: string): string {
  return table
    .split('.')
    .map((part) => pg.escapeIdentifier(part))
    .join('.');
}

/**
 * The DDL of the run-record table: one row per successful run; the primary key on (name, key) is what
 * makes a run happen at most once (the advisory lock only keeps two runs from overlapping).
 *
 * @example
 * await pool.query(singleRunTableSql('jobs.single_run'));
 */
export function singleRunTableSql(table: string = SINGLE_RUN_TABLE): string {
  // CREATE TABLE takes no lock on existing objects (it is a no-op when the table exists).
  return `CREATE TABLE IF NOT EXISTS ${quoteTable(table)} (
  name text NOT NULL,
  key text NOT NULL,
  result jsonb,
  completed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (name, key)
)`;
}

/**
 * Creates the table {@link singleRun} records runs in (idempotent). Safe from many processes at once:
 * the CREATE runs under a transaction-scoped advisory lock (concurrent `CREATE TABLE IF NOT EXISTS`
 * otherwise race in the catalog), and it always resolves to a Result — a lock wait past 5 s, missing
 * privileges or a lost connection is an `Err`, never a rejected promise.
 *
 * @example
 * await migrateSingleRun(pool); // or migrateSingleRun(pool, { table: 'jobs.single_run' })
 */
export async function migrateSingleRun(
  db: Queryable,
  options: { readonly table?: string } = {},
): Promise<Result<void, InvalidOptions | DatabaseFailure>> {
  const parsed = parseOptions(z.object({ table: tableSchema }).strict(), options);
  if (parsed.isErr()) return err(parsed.error);
  const table = parsed.value.table;
  return runMigration(db, { name: `single-run:${table}` }, async (q) => {
    await q.query(singleRunTableSql(table));
  });
}

/**
 * Runs `fn` at most once successfully per `(name, key)`: the run is recorded in a table with a
 * primary key on (name, key), in the SAME transaction as `fn`'s database effects.
 *
 * - A repeat (the job already ran to success) → `Err(AlreadyDone)` carrying the stored result (the
 *   JSON of what `fn` returned) and its completion time. `fn` is not called.
 * - Another caller running the same (name, key) right now → `Err(LockBusy)` at once (a
 *   transaction-scoped try-lock: no waiting, nothing leaks if a connection dies).
 * - `fn` returns an `Err`, throws, or the transaction fails → nothing is recorded, so another replica
 *   (or the next cron tick) can do the job. A replica that cannot finish the job (no publish
 *   credentials: a developer's laptop pointed at production) must check that first and return an `Err`:
 *   it never claims it.
 * - `fn`'s return value is stored as jsonb: BigInts are kept (tagged) and come back as BigInts; a value
 *   JSON cannot hold (a cycle) → `InvalidOptions` and nothing is recorded (fn's effects roll back).
 *
 * A lock is not idempotency: the lock stops two simultaneous runs; the record is what makes it once.
 * Effects outside the database (HTTP, messaging) are not covered by the transaction: register them
 * with `tx.afterCommit` (they may then be lost if the process dies right after COMMIT), or record an
 * outbox row inside `fn` and deliver it with row locks (`FOR UPDATE SKIP LOCKED`).
 *
 * @example
 * const result = await singleRun(tm, { name: 'daily-post', key: '2026-11-30' }, async (tx) => {
 *   if (!process.env.TELEGRAM_BOT_TOKEN) return err(new Error('cannot publish: do not claim'));
 *   const { rows } = await tx.query('INSERT INTO posts (day) VALUES ($1) RETURNING id', ['2026-11-30']);
 *   return ok({ postId: rows[0].id });
 * });
 * // ok({ postId }) once; then Err(AlreadyDone { result: { postId } }) on every other replica.
 */
export function singleRun<T, E = never, C extends Record<string, unknown> = Record<never, never>>(
  tm: TxManager<C>,
  spec: SingleRunSpec,
  fn: LockedCallback<T, E>,
): ResultAsync<T, E | SingleRunError | TxError | ConstraintErrors<C>> {
  const parsed = parseOptions(singleRunSpecSchema, spec);
  if (parsed.isErr()) return errAsync(parsed.error);
  const { name, key, table, tx: txOptions } = parsed.value;
  // The namespace holds a validated table name (no ':'), so this cannot throw.
  const lockKey = advisoryKey(`pg-txkit/single-run/${table}`, JSON.stringify([name, key]));
  const qt = quoteTable(table);
  // No lock: plain read of the run record (a committed run is final, so reading it is enough).
  const selectSql = `SELECT result, completed_at FROM ${qt} WHERE name = $1 AND key = $2`;
  // Row lock on the new primary-key entry (RowExclusiveLock on the table): records the run in fn's
  // transaction; a concurrent insert of the same (name, key) waits for us and then conflicts.
  const insertSql = `INSERT INTO ${qt} (name, key, result) VALUES ($1, $2, $3::jsonb)
    ON CONFLICT (name, key) DO NOTHING RETURNING completed_at`;

  const alreadyDone = async (tx: Queryable): Promise<AlreadyDone<unknown> | undefined> => {
    const { rows } = await tx.query<{ result: unknown; completed_at: Date }>(selectSql, [name, key]);
    const row = rows[0];
    return row ? new AlreadyDone<unknown>(decodeStoredResult(row.result), row.completed_at) : undefined;
  };

  return tm.do(async (tx: Tx): Promise<Result<T, E | SingleRunError>> => {
    // Cheap exit for the common repeat, before taking any lock.
    const before = await alreadyDone(tx);
    if (before) return err(before);
    const locked = await acquireXactLocks(tx, [lockKey], { wait: 'try' });
    if (locked.isErr()) return err(locked.error as LockBusy);
    // Re-read under the lock: the previous holder may have committed between our read and our lock
    // (in read committed this statement's snapshot is taken after the lock was granted).
    const after = await alreadyDone(tx);
    if (after) return err(after);
    const result = toResult<T, E>(await fn(tx));
    if (result.isErr()) return err(result.error);
    const json = encodeStoredResult(result.value);
    if (json.isErr()) return err(json.error); // rolls back fn's effects: nothing recorded
    const inserted = await tx.query(insertSql, [name, key, json.value]);
    if (inserted.rowCount === 0) {
      // Only reachable when the snapshot predates a concurrent run's commit: give up our effects.
      return err((await alreadyDone(tx)) ?? new AlreadyDone<unknown>(null));
    }
    return ok(result.value);
  }, txOptions) as ResultAsync<T, E | SingleRunError | TxError | ConstraintErrors<C>>;
}
