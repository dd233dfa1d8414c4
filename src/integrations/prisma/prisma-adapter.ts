import { PrismaPg } from '@prisma/adapter-pg';
import type { SqlDriverAdapter, SqlDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import type { TxManager } from '../../tx/tx-manager.js';
import { type BuilderOptions, builderSettings } from '../shared/builder-options.js';
import { PrismaTxAdapter } from './prisma-driver-adapter.js';
import type { PrismaPgOptions } from './prisma-pg-options.js';
import { routedPool } from './routed-pool.js';

/**
 * Options of {@link prismaAdapter}: the builders' `propagation` (how `$transaction` joins a `tm.do`
 * around it), and `pg`, `@prisma/adapter-pg`'s own options.
 */
export type PrismaAdapterOptions = BuilderOptions & {
  /** Passed to `@prisma/adapter-pg` (the manager's pool is used: its pool options do not apply). */
  readonly pg?: PrismaPgOptions;
};

/**
 * Prisma's driver adapter factory over a `TxManager`: one line of setup, and every Prisma query
 * runs on `tm.db()` — inside `tm.do` on the transaction's pinned client (also from a repository that
 * only imports `prisma`), with its retries (a 40001 inside a Prisma query re-runs the callback) and
 * typed errors (decided from the driver error the query raised, which Prisma replaces by its own);
 * outside on the manager's pool. Built on `@prisma/adapter-pg` (its type conversions and error mapping
 * are Prisma's own).
 *
 * Prisma's `$transaction(…)` never sends BEGIN or COMMIT: inside `tm.do` it joins the transaction per
 * `options.propagation` — `'required'` (default): the same transaction (a thrown callback rolls nothing
 * back by itself: the error goes up and the outer callback decides); `'nested'`: a SAVEPOINT of the
 * manager's (a thrown callback undoes only its own writes; inside it, query through its client: the
 * outer `prisma` is refused while the savepoint is open). Outside `tm.do` it is a plain transaction of
 * the manager (its BEGIN with the manager's defaults and the asked `isolationLevel`; one attempt, no
 * retries: Prisma runs the callback, only `tm.do` can run it again).
 *
 * @throws InvalidOptions for a `propagation` it does not know (at setup, before any query).
 *
 * @example
 * import { prismaAdapter } from 'pg-txkit/prisma';
 * import { PrismaClient } from './generated/prisma/client.js';
 *
 * const prisma = new PrismaClient({ adapter: prismaAdapter(tm) });
 * await tm.doOrThrow(async () => {
 *   await prisma.doctor.update({ where: { id }, data: { onCall: false } });
 * }, { isolation: 'serializable' });
 */
export function prismaAdapter<C extends Record<string, unknown>>(
  tm: TxManager<C>,
  options: PrismaAdapterOptions = {},
): SqlDriverAdapterFactory {
  const { pg, ...builder } = options;
  const settings = builderSettings(builder);
  return {
    provider: 'postgres',
    adapterName: '@prisma/adapter-pg',
    async connect(): Promise<SqlDriverAdapter> {
      const Routed = await routedPool();
      const routed = new Routed(() => tm.db());
      const main = await new PrismaPg(routed, pg).connect();
      if (main.underlyingDriver() !== routed) {
        // Never silently: a pool of the adapter's own would run Prisma's queries outside the manager.
        await main.dispose();
        throw new Error("pg-txkit: @prisma/adapter-pg did not take the manager's pool");
      }
      return new PrismaTxAdapter(tm, main, Routed, settings, pg);
    },
  };
}
