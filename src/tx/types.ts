import type pg from 'pg';

/** Anything that runs queries with node-postgres' signatures: a pool, a client, or a {@link Tx}. */
export interface Queryable {
  /** pg's `query(text, values)`. */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
  ): Promise<pg.QueryResult<R>>;
  /** pg's `query(config)`. */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    config: pg.QueryConfig,
  ): Promise<pg.QueryResult<R>>;
  /** pg's `query(config, values)`: the values are merged into the config, as pg does. */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    config: pg.QueryConfig,
    values: readonly unknown[] | undefined,
  ): Promise<pg.QueryResult<R>>;
}

/** Transaction isolation levels PostgreSQL implements (`read uncommitted` behaves as read committed). */
export type Isolation = 'read committed' | 'repeatable read' | 'serializable';

/**
 * A callback registered with {@link Tx.afterCommit}. It may return anything: a returned promise is
 * awaited before the next callback runs, the value is ignored (so `() => mailer.send(…)` fits).
 *
 * @example
 * tx.afterCommit(() => mailer.send(email, { idempotencyKey: `welcome:${id}`, signal }));
 */
export type AfterCommit = () => unknown;
/**
 * A callback registered with {@link Tx.afterRollback}; receives the error that rolled back. Like
 * {@link AfterCommit}, it may return anything: a promise is awaited, the value ignored.
 *
 * @example
 * tx.afterRollback((error) => log.warn({ error }, 'order not placed'));
 */
export type AfterRollback = (error: unknown) => unknown;

/**
 * The handle of one attempt of a transaction run by `TxManager.do`. It has pg's `query` signatures,
 * runs on the attempt's one pinned client, and is what the patterns take as `db`.
 */
export interface Tx extends Queryable {
  /** Brand that tells a Tx from a pool or client without instanceof across package copies. */
  readonly [TX]: true;
  /** 1-based attempt number of the outermost transaction. */
  readonly attempt: number;
  /** Isolation level of the transaction. */
  readonly isolation: Isolation;
  /** Whether the transaction is read only. */
  readonly readOnly: boolean;
  /** The transaction's name (`TxOptions.name`), for logs and hooks. */
  readonly name: string | undefined;
  /** Nesting depth: 0 for the outermost scope, 1+ inside `nested` savepoints. */
  readonly depth: number;
  /** Runs `fn` once after the outermost COMMIT succeeds (dropped if this attempt is retried). */
  afterCommit(fn: AfterCommit): void;
  /** Runs `fn` after this attempt rolls back (once per rolled-back attempt). */
  afterRollback(fn: AfterRollback): void;
}

/** Brand symbol of {@link Tx} (registered, so two copies of the package agree). */
export const TX: unique symbol = Symbol.for('pg-txkit.tx') as never;

/** What the patterns accept as `db`: `tm.db()`, a {@link Tx}, a pool or a client. */
export type Db = Tx | pg.Pool | pg.PoolClient | pg.Client | Queryable;

/** Is this a transaction handle from `TxManager`? */
export function isTx(db: unknown): db is Tx {
  return typeof db === 'object' && db !== null && (db as Partial<Record<typeof TX, unknown>>)[TX] === true;
}

/**
 * Is `db` inside a transaction, as far as can be known without asking the server? True for a
 * {@link Tx} and for a pg client whose last ReadyForQuery said 'T' (in a transaction) or 'E' (failed
 * transaction); false for a pool (its query runs on an idle client) or no queryable at all; undefined
 * for a client of a pg older than 8.21, which keeps no transaction status.
 */
function knownInTransaction(db: unknown): boolean | undefined {
  if (isTx(db)) return true;
  if (typeof db !== 'object' || db === null) return false;
  const d = db as { getTransactionStatus?: () => string | null; query?: unknown; totalCount?: unknown };
  if (typeof d.getTransactionStatus === 'function') {
    const status = d.getTransactionStatus();
    return status === 'T' || status === 'E';
  }
  if (typeof d.totalCount === 'number') return false; // a pool, by shape
  return typeof d.query === 'function' ? undefined : false;
}

/** 25P02: "current transaction is aborted": only a session inside a failed transaction says it. */
const IN_FAILED_TRANSACTION = '25P02';

/**
 * Is `db` inside a transaction? Answered locally where pg reports the status (a {@link Tx}, pg 8.21+,
 * a pool); on an older pg's client, asked of the server in one statement. Rejects with the driver's
 * error when that statement fails for another reason (a lost connection).
 *
 * @example
 * await client.query('BEGIN');
 * await inTransaction(client); // → true
 */
export async function inTransaction(db: unknown): Promise<boolean> {
  const known = knownInTransaction(db);
  if (known !== undefined) return known;
  try {
    // No lock. In autocommit a statement is its own transaction, so both timestamps are its start;
    // inside a transaction block the transaction started with an earlier statement (BEGIN).
    const { rows } = await (db as Queryable).query<{ in_tx: boolean }>(
      'SELECT statement_timestamp() <> transaction_timestamp() AS in_tx',
    );
    return rows[0]?.in_tx === true;
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code === IN_FAILED_TRANSACTION) return true;
    throw error;
  }
}
