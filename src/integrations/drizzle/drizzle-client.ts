import type { TxManager } from '../../tx/tx-manager.js';
import { type BuilderOptions, builderSettings } from '../shared/builder-options.js';
import { DrizzleTxPool } from './drizzle-pool.js';

/**
 * The `client` for drizzle's node-postgres driver, routed through a `TxManager`: one line of
 * setup, and every drizzle query runs on `tm.db()` — inside `tm.do`, on the transaction's pinned client
 * (also from a repository module that only imports `db`), with its retries, typed errors and
 * `constraints` map (drizzle's `DrizzleQueryError` is classified by its `cause`, the driver's error);
 * outside, on the manager's pool.
 *
 * drizzle's own `db.transaction(fn, config)` never sends its BEGIN, COMMIT or ROLLBACK: inside `tm.do`
 * it joins the transaction per `options.propagation` — `'required'` (default): the same transaction (a
 * thrown callback rolls nothing back by itself: the error goes up and the outer callback decides);
 * `'nested'`: a SAVEPOINT of the manager's (a thrown callback undoes only its own writes; inside it,
 * query through its `tx`: the outer `db` is refused while the savepoint is open). Outside `tm.do` it is a
 * plain transaction of the manager (its BEGIN with the manager's defaults, `config`'s isolation / access
 * mode / deferrable; one attempt, no retries: drizzle runs the callback, only `tm.do` can run it again).
 * drizzle's `tx.transaction()` inside it is drizzle's own savepoint, sent in the transaction.
 *
 * @throws InvalidOptions for options it does not know (at setup, before any query).
 *
 * @example
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { drizzleClient } from 'pg-txkit/drizzle';
 *
 * const db = drizzle({ client: drizzleClient(tm) });
 * await tm.doOrThrow(async () => {
 *   await db.update(doctors).set({ onCall: false }).where(eq(doctors.id, id));
 * }, { isolation: 'serializable' });
 */
export function drizzleClient<C extends Record<string, unknown>>(
  tm: TxManager<C>,
  options?: BuilderOptions,
): DrizzleTxPool<C> {
  return new DrizzleTxPool(tm, builderSettings(options));
}
