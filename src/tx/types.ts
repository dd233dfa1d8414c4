import type pg from 'pg';

/** Anything that runs queries with node-postgres' signatures: a pool, a client, or a {@link Tx}. */
export interface Queryable {
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
  ): Promise<pg.QueryResult<R>>;
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    config: pg.QueryConfig,
  ): Promise<pg.QueryResult<R>>;
}

/** Transaction isolation levels PostgreSQL implements (`read uncommitted` behaves as read committed). */
export type Isolation = 'read committed' | 'repeatable read' | 'serializable';

/** A callback registered with {@link Tx.afterCommit}. */
export type AfterCommit = () => void | Promise<void>;
/** A callback registered with {@link Tx.afterRollback}; receives the error that rolled back. */
export type AfterRollback = (error: unknown) => void | Promise<void>;

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
 * Is `db` known to be inside a transaction? True for a {@link Tx}, and for a pg client whose last
 * ReadyForQuery said 'T' (in a transaction) or 'E' (failed transaction); false for a pool.
 */
export function inTransaction(db: unknown): boolean {
  if (isTx(db)) return true;
  if (typeof db !== 'object' || db === null) return false;
  const status = (db as { getTransactionStatus?: () => string | null }).getTransactionStatus?.();
  return status === 'T' || status === 'E';
}
