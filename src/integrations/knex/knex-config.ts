import type { Knex } from 'knex';
import ClientPG from 'knex/lib/dialects/postgres/index.js';
import type { TxManager } from '../../tx/tx-manager.js';
import { type BuilderOptions, builderSettings } from '../shared/builder-options.js';
import { TxKitKnexConnection } from './txkit-knex-connection.js';

/** What `knexConfig` takes from a Knex config: everything but how Knex connects (the manager does). */
export type KnexConfigInput = Omit<Knex.Config, 'client' | 'connection' | 'pool'> & BuilderOptions;

/**
 * The config for `knex(…)` that runs every Knex query through a `TxManager`: the ONE line of
 * setup. Knex gets no pool and no connection settings of its own.
 *
 * - Outside `tm.do`, a query runs on the manager's pool; inside, on the transaction's pinned client —
 *   also from a repository that only imports `db`. Retries, typed errors, `constraints` and
 *   `afterCommit` are the manager's.
 * - `db.transaction(fn)` inside `tm.do` joins it per `propagation` (`'required'`, the default: the
 *   same transaction, nothing sent; `'nested'`: a savepoint of the manager's) and never sends BEGIN or
 *   COMMIT. Outside `tm.do` it is a plain transaction of the manager: its BEGIN with the manager's
 *   defaults, one attempt, no retries (Knex runs the callback; wrap it in `tm.do` for retries).
 * - A nested `trx.transaction(fn)` is Knex's own savepoint, sent in the transaction.
 * - `db.destroy()` leaves the pool open: it is the manager's. Streaming (`.stream()`) is not supported.
 *
 * @example
 * import knex from 'knex';
 * import { knexConfig } from 'pg-txkit/knex';
 *
 * const db = knex(knexConfig(tm));
 * await tm.doOrThrow(async () => {
 *   await db('accounts').where({ id: 1 }).decrement('balance', 10);
 * }, { isolation: 'serializable' });
 */
export function knexConfig<C extends Record<string, unknown>>(
  tm: TxManager<C>,
  config: KnexConfigInput = {},
): Knex.Config {
  const { propagation, ...knexOptions } = config;
  const settings = builderSettings(propagation === undefined ? {} : { propagation });
  /** Knex's PostgreSQL client whose "connections" route each query through the manager. */
  class TxKitKnexClient extends ClientPG {
    override initializePool(): void {}

    override async acquireConnection(): Promise<TxKitKnexConnection<C>> {
      return new TxKitKnexConnection(tm, settings);
    }

    override async releaseConnection(): Promise<void> {}

    /** The pool is the manager's (and the application's): `db.destroy()` leaves it open. */
    override async destroy(callback?: (error?: unknown) => void): Promise<void> {
      callback?.();
    }
  }
  return { ...knexOptions, client: TxKitKnexClient };
}
