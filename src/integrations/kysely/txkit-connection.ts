import type { CompiledQuery, DatabaseConnection, QueryResult } from 'kysely';
import type { TxManager } from '../../tx/tx-manager.js';
import {
  type BuilderTransaction,
  type BuilderTransactionOptions,
  openBuilderTransaction,
} from '../shared/builder-transaction.js';

/** Commands whose row count Kysely reports as `numAffectedRows` (as its own PostgresConnection does). */
const AFFECTING = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

/**
 * The connection Kysely runs a query (or a transaction) on. It holds no client: each query goes to
 * `tm.db()` when it runs — the caller's transaction inside `tm.do`, the pool outside — and, between
 * Kysely's `beginTransaction` and its commit or rollback, to the scope the manager opened for it.
 *
 * @example
 * // Made by the driver for Kysely; a user never constructs one:
 * const db = new Kysely<Database>({ dialect: kyselyDialect(tm) });
 */
export class TxKitConnection<C extends Record<string, unknown>> implements DatabaseConnection {
  readonly #tm: TxManager<C>;
  #scope: BuilderTransaction | undefined;

  constructor(tm: TxManager<C>) {
    this.#tm = tm;
  }

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    const db = this.#scope?.tx ?? this.#tm.db();
    const { command, rowCount, rows } = await db.query(compiledQuery.sql, compiledQuery.parameters);
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
