import { PrismaPg } from '@prisma/adapter-pg';
import type { SqlDriverAdapter, SqlDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import type { TxManager } from '../../tx/tx-manager.js';
import type { Propagation } from '../../tx/tx-options.js';
import { PrismaTxAdapter } from './prisma-driver-adapter.js';
import { routedPool } from './routed-pool.js';

/** Propagations a Prisma `$transaction` can take (see {@link PrismaAdapterOptions.propagation}). */
export type PrismaPropagation = Extract<Propagation, 'required' | 'nested' | 'mandatory'>;

/** `@prisma/adapter-pg`'s own options (`schema`, `statementNameGenerator`, `userDefinedTypeParser` …). */
export type PrismaPgOptions = NonNullable<ConstructorParameters<typeof PrismaPg>[1]>;

/** Options of {@link prismaAdapter}. */
export interface PrismaAdapterOptions {
  /**
   * What Prisma's `$transaction(…)` does inside `tm.do` (its BEGIN and COMMIT never reach the server):
   * - `'required'` (default): it joins the active transaction (a thrown callback rolls nothing back by
   *   itself: the error goes up and the outer callback decides);
   * - `'nested'`: it runs in a SAVEPOINT (a thrown callback rolls back only its own writes); inside it,
   *   query through its client `p`: the outer `prisma` is refused while the savepoint is open;
   * - `'mandatory'`: as `'required'`, and refused outside `tm.do` (`NotInTransaction`, nothing sent).
   * Outside `tm.do`, `'required'` and `'nested'` run it as a transaction of the manager (its defaults,
   * hooks) with ONE attempt: Prisma owns the callback, only `tm.do` can run it again.
   */
  readonly propagation?: PrismaPropagation;
  /** Passed to `@prisma/adapter-pg` (the pool options of its own are ignored: the manager's pool is used). */
  readonly pg?: PrismaPgOptions;
}

/**
 * Prisma's driver adapter factory over a {@link TxManager}: one line of setup, and every Prisma query
 * runs on `tm.db()` — inside `tm.do` on the transaction's pinned client (also from a repository that
 * only imports `prisma`), with its retries (a 40001 inside a Prisma query re-runs the callback) and
 * typed errors (decided from the driver error the query raised, which Prisma replaces by its own);
 * outside on the manager's pool. `$transaction(…)` follows `options.propagation`. Built on
 * `@prisma/adapter-pg` (its type conversions and error mapping are Prisma's own).
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
  return {
    provider: 'postgres',
    adapterName: '@prisma/adapter-pg',
    async connect(): Promise<SqlDriverAdapter> {
      const Routed = await routedPool();
      const routed = new Routed(() => tm.db());
      const main = await new PrismaPg(routed, options.pg).connect();
      if (main.underlyingDriver() !== routed) {
        // Never silently: a pool of the adapter's own would run Prisma's queries outside the manager.
        await main.dispose();
        throw new Error("pg-txkit: @prisma/adapter-pg did not take the manager's pool");
      }
      return new PrismaTxAdapter(tm, main, Routed, options);
    },
  };
}
