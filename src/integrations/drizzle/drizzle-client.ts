import type { TxManager } from '../../tx/tx-manager.js';
import { DrizzleTxPool } from './drizzle-pool.js';
import type { DrizzlePropagation } from './drizzle-transaction-client.js';

/** Options of {@link drizzleClient}. */
export interface DrizzleClientOptions {
  /**
   * What drizzle's own `db.transaction(fn, config)` does inside `tm.do` (its BEGIN, COMMIT and ROLLBACK
   * never reach the server):
   * - `'required'` (default): it joins the active transaction (same client, same snapshot; a rollback of
   *   its callback rolls nothing back by itself: the error goes up and the outer callback decides);
   * - `'nested'`: it runs in a SAVEPOINT of the active transaction (a thrown callback rolls back only its
   *   own writes); inside it, query through its `tx`: the outer `db` is refused while the savepoint is
   *   open (`TxUsageError` 'concurrent-scope');
   * - `'mandatory'`: as `'required'`, and refused outside `tm.do` (`NotInTransaction`, nothing sent).
   * Outside `tm.do`, `'required'` and `'nested'` run it as a transaction of the manager (its defaults:
   * `lockTimeout`, hooks …) with ONE attempt: drizzle owns the callback, only `tm.do` can run it again.
   */
  readonly propagation?: DrizzlePropagation;
}

/**
 * The `client` for drizzle's node-postgres driver, routed through a {@link TxManager}: one line of
 * setup, and every drizzle query runs on `tm.db()` — inside `tm.do`, on the transaction's pinned client
 * (also from a repository module that only imports `db`), with its retries, typed errors and
 * `constraints` map (drizzle's `DrizzleQueryError` is classified by its `cause`, the driver's error);
 * outside, on the manager's pool. drizzle's own `db.transaction()` follows `options.propagation`.
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
  options: DrizzleClientOptions = {},
): DrizzleTxPool<C> {
  return new DrizzleTxPool(tm, options.propagation ?? 'required');
}
