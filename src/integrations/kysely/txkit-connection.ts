import type { CompiledQuery, DatabaseConnection, QueryResult } from 'kysely';
import type pg from 'pg';
import { looksLikeDatabaseError } from '../../errors/classify.js';
import type { TxManager } from '../../tx/tx-manager.js';
import {
  type BuilderTransaction,
  type BuilderTransactionOptions,
  openBuilderTransaction,
} from '../shared/builder-transaction.js';

/** Commands whose row count Kysely reports as `numAffectedRows` (as its own PostgresConnection does). */
const AFFECTING = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

/**
 * The connection Kysely runs a query (or a transaction) on. Inside `tm.do` each query goes to the
 * caller's transaction (`tm.db()`); between Kysely's `beginTransaction` and its commit or rollback, to
 * the scope the manager opened for it. Outside both, the connection checks out ONE pool client on its
 * first query and keeps it until Kysely releases the connection, so `db.connection().execute(…)` runs
 * every query on one backend (session state: advisory locks, SET, temporary tables), as Kysely
 * documents; a plain query is released right after it runs (one checkout per query, like `pool.query`).
 *
 * @example
 * // Made by the driver for Kysely; a user never constructs one:
 * const db = new Kysely<Database>({ dialect: kyselyDialect(tm) });
 */
export class TxKitConnection<C extends Record<string, unknown>> implements DatabaseConnection {
  readonly #tm: TxManager<C>;
  #scope: BuilderTransaction | undefined;
  /** The pool client this connection checked out outside any transaction (see {@link TxKitConnection.release}). */
  #client: Promise<pg.PoolClient> | undefined;
  /** The checked-out client's connection failed: the pool must discard it, not hand it out again. */
  #broken: Error | undefined;

  constructor(tm: TxManager<C>) {
    this.#tm = tm;
  }

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    const db = this.#scope?.tx ?? this.#tm.current();
    const { command, rowCount, rows } =
      db === undefined
        ? await this.#onClient(compiledQuery)
        : await db.query(compiledQuery.sql, compiledQuery.parameters);
    return {
      ...(AFFECTING.has(command) && rowCount !== null ? { numAffectedRows: BigInt(rowCount) } : {}),
      rows: (rows ?? []) as R[],
    };
  }

  // biome-ignore lint/correctness/useYield: refuses before producing anything.
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error(
      "pg-txkit's Kysely dialect does not stream: a cursor would hold the transaction's client between " +
        'reads. Page with limit/offset or keyset pagination instead.',
    );
  }

  /** Outside any transaction: the query runs on this connection's one pool client, checked out on first use. */
  async #onClient(compiledQuery: CompiledQuery): Promise<pg.QueryResult> {
    // Memoised as a promise: queries Kysely runs concurrently on one connection share one checkout.
    this.#client ??= this.#tm.pool.connect();
    const client = await this.#client;
    try {
      return await client.query(compiledQuery.sql, [...compiledQuery.parameters]);
    } catch (error) {
      // The server's error for a query leaves the session usable; anything else (a lost
      // connection, a client error) means the pool must not hand this client out again.
      if (!looksLikeDatabaseError(error)) {
        this.#broken = error instanceof Error ? error : new Error(String(error));
      }
      throw error;
    }
  }

  /** Kysely's `releaseConnection`: gives the client checked out outside a transaction back to the pool. */
  async release(): Promise<void> {
    const checkout = this.#client;
    this.#client = undefined;
    if (checkout === undefined) return;
    const broken = this.#broken;
    this.#broken = undefined;
    const client = await checkout.catch(() => undefined);
    client?.release(broken);
  }

  /** Kysely's `beginTransaction`: the manager opens the scope (joined, a savepoint, or a transaction). */
  async begin(options: BuilderTransactionOptions): Promise<void> {
    this.#scope = await openBuilderTransaction(this.#tm, options);
  }

  /** Kysely's commit or rollback of the scope {@link TxKitConnection.begin} opened. */
  async end(how: 'commit' | 'rollback'): Promise<void> {
    const scope = this.#scope;
    this.#scope = undefined;
    if (scope === undefined) {
      // Kysely rolls back after a failed COMMIT: the scope has already ended (and rolled back); its
      // error, not this call, is what the user must see.
      if (how === 'rollback') return;
      throw new Error('pg-txkit: no transaction to commit on this Kysely connection');
    }
    await (how === 'commit' ? scope.commit() : scope.rollback());
  }
}
