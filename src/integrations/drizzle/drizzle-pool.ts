import pg from 'pg';
import type { TxManager } from '../../tx/tx-manager.js';
import type { BuilderSettings } from '../shared/builder-options.js';
import { DrizzleTransactionClient } from './drizzle-transaction-client.js';

/**
 * The `client` `drizzleClient(tm)` gives to `drizzle({ client })`: a `pg.Pool` by type and by class
 * (drizzle's node-postgres session treats a pool's `transaction()` as "check out a client, BEGIN …
 * COMMIT on it"), that never opens a connection of its own:
 * - `query(…)` runs on `tm.db()`: the transaction of the calling async context inside `tm.do`, else
 *   the manager's pool;
 * - `connect()` is drizzle's `transaction()`: it returns a `DrizzleTransactionClient` (internal), which turns
 *   drizzle's BEGIN / COMMIT / ROLLBACK into a scope of the manager.
 * The pool to configure, watch and `end()` is the one the `TxManager` was made with.
 *
 * Cost (bench/query-builders.ts, client CPU per one-UPDATE transaction, medians of two runs): 231 / 260 µs
 * through this client, 265 / 275 µs for drizzle alone on its own pool, 186 / 201 µs for raw `tm.do`; the
 * routing here is under 0.5 % of a CPU profile's samples, the rest is drizzle building and running its
 * statement.
 *
 * @example
 * const db = drizzle({ client: new DrizzleTxPool(tm, { propagation: 'required' }) });
 */
export class DrizzleTxPool<C extends Record<string, unknown>> extends pg.Pool {
  constructor(tm: TxManager<C>, settings: BuilderSettings) {
    // The options are the manager pool's, for whoever reads `db.$client.options`; no client is ever made.
    super(tm.pool.options);
    // Own properties, like TxManager's strict guard: pg.Pool's overloads (callbacks, submittables) are
    // not drizzle's; drizzle calls query(text | config, values) and connect().
    Object.defineProperty(this, 'query', {
      configurable: true,
      writable: true,
      value: (query: string | pg.QueryConfig, values?: readonly unknown[]): Promise<pg.QueryResult> =>
        tm.db().query(typeof query === 'string' ? { text: query } : query, values),
    });
    Object.defineProperty(this, 'connect', {
      configurable: true,
      writable: true,
      value: (): Promise<DrizzleTransactionClient<C>> =>
        Promise.resolve(new DrizzleTransactionClient(tm, settings)),
    });
  }
}
