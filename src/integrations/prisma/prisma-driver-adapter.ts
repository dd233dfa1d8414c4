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
import { ScopeBridge } from '../shared/scope-bridge.js';
import type { PrismaAdapterOptions } from './prisma-adapter.js';
import { prismaIsolation } from './prisma-isolation.js';
import { PrismaTxTransaction } from './prisma-transaction.js';
import type { RoutedPoolClass } from './routed-pool.js';

/**
 * The driver adapter Prisma gets from `prismaAdapter(tm)`: `@prisma/adapter-pg` (its argument and
 * result conversions, its error mapping) over a pool that sends every query to `tm.db()`, and
 * transactions that are scopes of the manager. Internal to `prismaAdapter`.
 *
 * @example
 * const adapter = new PrismaTxAdapter(tm, await new PrismaPg(new Routed(() => tm.db())).connect(), Routed, {});
 */
export class PrismaTxAdapter<C extends Record<string, unknown>> implements SqlDriverAdapter {
  readonly provider: SqlDriverAdapter['provider'];
  readonly adapterName: SqlDriverAdapter['adapterName'];
  readonly #tm: TxManager<C>;
  readonly #main: SqlDriverAdapter;
  readonly #Routed: RoutedPoolClass;
  readonly #options: PrismaAdapterOptions;

  constructor(
    tm: TxManager<C>,
    main: SqlDriverAdapter,
    Routed: RoutedPoolClass,
    options: PrismaAdapterOptions,
  ) {
    this.provider = main.provider;
    this.adapterName = main.adapterName;
    this.#tm = tm;
    this.#main = main;
    this.#Routed = Routed;
    this.#options = options;
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
   * transaction's, `mandatory` outside `tm.do`, a doomed transaction).
   */
  async startTransaction(isolationLevel?: IsolationLevel): Promise<Transaction> {
    const bridge = new ScopeBridge(this.#tm);
    await bridge.open({
      ...(isolationLevel === undefined ? {} : { isolation: prismaIsolation(isolationLevel) }),
      propagation: this.#options.propagation ?? 'required',
      // Outside tm.do: one attempt; Prisma owns the callback, only tm.do can run it again.
      maxAttempts: 1,
      retryOn: [],
    });
    const scope = await new PrismaPg(
      new this.#Routed(() => {
        const tx = bridge.tx;
        if (tx === undefined) {
          throw new TxUsageError(
            'transaction-closed',
            "a query of Prisma's transaction was sent after it ended",
          );
        }
        return tx;
      }),
      this.#options.pg,
    ).connect();
    return new PrismaTxTransaction(scope, bridge);
  }

  /** Gives nothing back to the manager's pool: it is the application's, to end. */
  dispose(): Promise<void> {
    return this.#main.dispose();
  }
}
