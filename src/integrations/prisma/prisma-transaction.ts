import type { SqlDriverAdapter, SqlQuery, SqlResultSet, Transaction } from '@prisma/driver-adapter-utils';
import type { BuilderTransaction } from '../shared/builder-transaction.js';

/**
 * The `Transaction` Prisma gets for `$transaction(…)`: a scope of the manager. Its queries run on the
 * scope's `Tx` (through `@prisma/adapter-pg`'s conversions); `usePhantomQuery: true` tells Prisma not to
 * send COMMIT / ROLLBACK itself, so `commit()` / `rollback()` end the scope and the manager sends what
 * the propagation calls for (COMMIT, RELEASE / ROLLBACK TO SAVEPOINT, or nothing for a join). Prisma's
 * nested `$transaction` savepoints are statements of the scope. Internal to `prismaAdapter`.
 *
 * @example
 * const tx = new PrismaTxTransaction(scopeAdapter, await openBuilderTransaction(tm), () => {});
 * await tx.executeRaw({ sql: 'INSERT INTO t VALUES (1)', args: [], argTypes: [] });
 * await tx.commit();
 */
export class PrismaTxTransaction implements Transaction {
  readonly provider: Transaction['provider'];
  readonly adapterName: Transaction['adapterName'];
  readonly options = { usePhantomQuery: true };
  readonly #scope: SqlDriverAdapter;
  readonly #builderTransaction: BuilderTransaction;
  readonly #onEnd: () => void;

  constructor(scope: SqlDriverAdapter, builderTransaction: BuilderTransaction, onEnd: () => void) {
    this.provider = scope.provider;
    this.adapterName = scope.adapterName;
    this.#scope = scope;
    this.#builderTransaction = builderTransaction;
    this.#onEnd = onEnd;
  }

  queryRaw(query: SqlQuery): Promise<SqlResultSet> {
    return this.#scope.queryRaw(query);
  }

  executeRaw(query: SqlQuery): Promise<number> {
    return this.#scope.executeRaw(query);
  }

  async commit(): Promise<void> {
    this.#onEnd();
    try {
      await this.#builderTransaction.commit();
    } finally {
      await this.#scope.dispose();
    }
  }

  async rollback(): Promise<void> {
    this.#onEnd();
    try {
      await this.#builderTransaction.rollback();
    } finally {
      await this.#scope.dispose();
    }
  }

  // SAVEPOINT / ROLLBACK TO / RELEASE: no lock; Prisma's nested $transaction inside this one.
  async createSavepoint(name: string): Promise<void> {
    await this.#scope.executeRaw({ sql: `SAVEPOINT ${name}`, args: [], argTypes: [] });
  }

  async rollbackToSavepoint(name: string): Promise<void> {
    await this.#scope.executeRaw({ sql: `ROLLBACK TO SAVEPOINT ${name}`, args: [], argTypes: [] });
  }

  async releaseSavepoint(name: string): Promise<void> {
    await this.#scope.executeRaw({ sql: `RELEASE SAVEPOINT ${name}`, args: [], argTypes: [] });
  }
}
