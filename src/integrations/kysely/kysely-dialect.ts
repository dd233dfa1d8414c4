import {
  type DatabaseIntrospector,
  type Dialect,
  type DialectAdapter,
  type Driver,
  type Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type QueryCompiler,
} from 'kysely';
import type { TxManager } from '../../tx/tx-manager.js';
import { type BuilderOptions, builderSettings } from '../shared/builder-options.js';
import { TxKitDriver } from './txkit-driver.js';

/**
 * A Kysely `Dialect` that runs every query through a `TxManager`: the ONE line of setup.
 *
 * - Outside `tm.do`, a query runs on the manager's pool; inside, on the transaction's pinned client —
 *   also from a repository function that only imports `db` (the manager's async context travels with
 *   the call). Retries, typed errors, `constraints` and `afterCommit` are the manager's.
 * - `db.transaction().execute(fn)` / `db.startTransaction()` inside `tm.do` join it per
 *   `propagation` (`'required'`, the default: the same transaction, nothing sent; `'nested'`: a
 *   savepoint of the manager's) and never send BEGIN or COMMIT. Outside `tm.do` they are a plain
 *   transaction of the manager: its BEGIN with the manager's defaults, one attempt, no retries (Kysely
 *   runs the callback, so it cannot be re-run: wrap it in `tm.do` for retries).
 * - `trx.savepoint(name)` and its rollback / release are the user's own savepoints, sent in the
 *   transaction. Streaming (`.stream()`) is refused: a cursor would hold the transaction's client.
 * - `db.destroy()` leaves the pool open: it is the manager's; end it where you made it.
 *
 * @example
 * import { Kysely } from 'kysely';
 * import { kyselyDialect } from 'pg-txkit/kysely';
 *
 * const db = new Kysely<Database>({ dialect: kyselyDialect(tm) });
 * await tm.doOrThrow(async () => {
 *   await db.updateTable('accounts').set({ balance: 0 }).where('id', '=', 1).execute();
 * }, { isolation: 'serializable' });
 */
export function kyselyDialect<C extends Record<string, unknown>>(
  tm: TxManager<C>,
  options?: BuilderOptions,
): Dialect {
  const settings = builderSettings(options);
  return {
    createDriver: (): Driver => new TxKitDriver(tm, settings),
    createQueryCompiler: (): QueryCompiler => new PostgresQueryCompiler(),
    createAdapter: (): DialectAdapter => new PostgresAdapter(),
    createIntrospector: (db: Kysely<unknown>): DatabaseIntrospector => new PostgresIntrospector(db),
  };
}
