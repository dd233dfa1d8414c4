import { PrismaPg } from '@prisma/adapter-pg';
import type {
  ConnectionInfo,
  IsolationLevel,
  SqlDriverAdapter,
  SqlQuery,
  SqlResultSet,
  Transaction,
} from '@prisma/driver-adapter-utils';
import type { TxManager } from '../../tx/tx-manager.js';
import { TxUsageError } from '../../tx/tx-usage-error.js';
import type { BuilderSettings } from '../shared/builder-options.js';
import { openBuilderTransaction } from '../shared/builder-transaction.js';
import { prismaIsolation } from './prisma-isolation.js';
import type { PrismaPgOptions } from './prisma-pg-options.js';
import { PrismaTxTransaction } from './prisma-transaction.js';
import type { RoutedPoolClass } from './routed-pool.js';

/**
 * The driver adapter Prisma gets from `prismaAdapter(tm)`: `@prisma/adapter-pg` (its argument and
 * result conversions, its error mapping) over a pool that sends every query to `tm.db()`, and
 * transactions that are scopes of the manager. Internal to `prismaAdapter`.
 *
 * @example
 * const main = await new PrismaPg(new Routed(() => tm.db())).connect();
 * const adapter = new PrismaTxAdapter(tm, main, Routed, { propagation: 'required' }, undefined);
 */
export class PrismaTxAdapter<C extends Record<string, unknown>> implements SqlDriverAdapter {
  readonly provider: SqlDriverAdapter['provider'];
  readonly adapterName: SqlDriverAdapter['adapterName'];
  readonly #tm: TxManager<C>;
  readonly #main: SqlDriverAdapter;
  readonly #Routed: RoutedPoolClass;
  readonly #settings: BuilderSettings;
  readonly #pg: PrismaPgOptions | undefined;

  constructor(
    tm: TxManager<C>,
    main: SqlDriverAdapter,
    Routed: RoutedPoolClass,
    settings: BuilderSettings,
    pg: PrismaPgOptions | undefined,
  ) {
    this.provider = main.provider;
    this.adapterName = main.adapterName;
    this.#tm = tm;
    this.#main = main;
    this.#Routed = Routed;
    this.#settings = settings;
    this.#pg = pg;
  }

  queryRaw(query: SqlQuery): Promise<SqlResultSet> {
    return this.#main.queryRaw(query);
  }

  executeRaw(query: SqlQuery): Promise<number> {
    return this.#main.executeRaw(query);
  }

  executeScript(script: string): Promise<void> {
    return this.#main.executeScript(script);
  }

  getConnectionInfo(): ConnectionInfo {
    return this.#main.getConnectionInfo?.() ?? { supportsRelationJoins: true };
  }

  /**
   * Prisma's `$transaction(…)`: a scope of the manager, per `options.propagation` (inside `tm.do`:
   * joined, or a SAVEPOINT; outside: one attempt of a transaction of the manager). Rejects, with
   * nothing sent, when the manager refuses the scope (a stronger isolation than the joined
   * transaction's, a doomed transaction, BEGIN failed).
   */
  async startTransaction(isolationLevel?: IsolationLevel): Promise<Transaction> {
    const scope = await openBuilderTransaction(this.#tm, {
      propagation: this.#settings.propagation,
      ...(isolationLevel === undefined ? {} : { isolation: prismaIsolation(isolationLevel) }),
    });
    let ended = false;
    const routed = new this.#Routed(() => {
      if (ended) {
        throw new TxUsageError(
          'transaction-closed',
          "a query of Prisma's transaction was sent after it ended",
        );
      }
      return scope.tx;
    });
    let adapter: SqlDriverAdapter;
    try {
      adapter = await new PrismaPg(routed, this.#pg).connect();
    } catch (error) {
      // Never leave the scope open (it would hold the transaction's client until the process ends).
      ended = true;
      await scope.rollback();
      throw error;
    }
    return new PrismaTxTransaction(adapter, scope, () => {
      ended = true;
    });
  }

  /** Gives nothing back to the manager's pool: it is the application's, to end. */
  dispose(): Promise<void> {
    return this.#main.dispose();
  }
}
