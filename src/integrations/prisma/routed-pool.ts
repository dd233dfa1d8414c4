import { PrismaPg } from '@prisma/adapter-pg';
import type pg from 'pg';
import type { Queryable } from '../../tx/types.js';

/** What a routed pool sends its queries to, asked at each query (`tm.db()`, or one scope's `Tx`). */
export type QueryTarget = () => Queryable;

/** A pool class whose instances send every query to a {@link QueryTarget} and never connect. */
export type RoutedPoolClass = new (target: QueryTarget) => pg.Pool;

/**
 * The pool class `@prisma/adapter-pg` accepts as an external pool: it takes a pool only when it is
 * `instanceof` ITS copy of `pg.Pool` (anything else is read as a connection config and gets a pool of
 * its own, which would bypass the manager). That copy is not always the application's (the adapter
 * depends on `pg` itself), so it is read from the adapter: a throwaway adapter over an empty config
 * shows its pool (which never connected, and is ended at once).
 */
async function adapterPoolClass(): Promise<typeof pg.Pool> {
  const probe = await new PrismaPg({}).connect();
  const pool = probe.underlyingDriver();
  await probe.dispose(); // ends the probe's own pool
  return pool.constructor as typeof pg.Pool;
}

let routedPoolClass: Promise<RoutedPoolClass> | undefined;

/**
 * A subclass of the adapter's `pg.Pool` whose `query(config)` runs on a {@link QueryTarget} (the
 * manager's transaction or pool) and whose `connect()` refuses: transactions go through the manager
 * (see `PrismaTxAdapter.startTransaction`). Built once per process.
 *
 * @example
 * const Routed = await routedPool();
 * const adapter = await new PrismaPg(new Routed(() => tm.db())).connect();
 */
export function routedPool(): Promise<RoutedPoolClass> {
  routedPoolClass ??= adapterPoolClass().then(
    (Base) =>
      class RoutedPool extends Base {
        constructor(target: QueryTarget) {
          super({ max: 1 });
          Object.defineProperty(this, 'query', {
            configurable: true,
            writable: true,
            value: (config: pg.QueryConfig): Promise<pg.QueryResult> => target().query(config),
          });
          Object.defineProperty(this, 'connect', {
            configurable: true,
            writable: true,
            value: (): Promise<never> =>
              Promise.reject(
                new Error('pg-txkit: a routed pool never connects; transactions go through the TxManager'),
              ),
          });
        }
      },
  );
  return routedPoolClass;
}
