import { err } from 'neverthrow';
import { RetriesExhausted } from '../../errors/errors.js';
import type { TxManager } from '../../tx/tx-manager.js';
import type { IsolationLevel, Propagation, TxOptions } from '../../tx/tx-options.js';
import type { Tx } from '../../tx/types.js';

/** The scope a query builder's own transaction runs in, and how it ends. */
export interface BuilderTransaction {
  /** Where the builder's queries go until it ends. */
  readonly tx: Tx;
  /** The builder commits: resolves when the scope ended (for an outermost one, COMMIT succeeded). */
  commit(): Promise<void>;
  /** The builder rolls back: resolves when the scope's work was undone (or left to the outer scope). */
  rollback(): Promise<void>;
}

/** What a builder's transaction is, relative to a `tm.do` around it. */
export interface BuilderTransactionOptions {
  /**
   * Inside `tm.do`: `'required'` (default) runs the builder's transaction as part of the caller's (no
   * SQL at all); `'nested'` gives it a savepoint of its own.
   */
  readonly propagation?: Extract<Propagation, 'required' | 'nested'>;
  /** The isolation the builder asked for (outside `tm.do`; inside, the manager refuses a different one). */
  readonly isolation?: IsolationLevel;
  /** The builder asked for a read-only transaction. */
  readonly readOnly?: boolean;
  /** The builder asked for a DEFERRABLE one (drizzle's `deferrable`; with serializable read only). */
  readonly deferrable?: boolean;
}

/** The value the bridge's callback returns when the builder rolls back (never seen by the user). */
const ROLLED_BACK = Symbol('pg-txkit: the builder rolled back');

/**
 * Opens the scope a query builder's own `transaction()` runs in, through `tm.do`, so BEGIN / COMMIT /
 * ROLLBACK / SAVEPOINT are always the manager's and never the builder's:
 * - inside `tm.do` it joins the caller's transaction per `propagation` (`'required'`: same
 *   transaction, nothing sent; `'nested'`: a generated savepoint);
 * - outside it, it is a plain transaction of the manager (its BEGIN with the manager's defaults, one
 *   attempt, no retries: the builder, not pg-txkit, runs the callback, so it cannot be re-run).
 *
 * A failure to open it (BEGIN failed, no connection) rejects with the manager's typed error; so does a
 * COMMIT that fails. The builder's callback keeps its own error: it runs outside this function.
 *
 * @example
 * const scope = await openBuilderTransaction(tm, { propagation: 'nested' });
 * await scope.tx.query('INSERT INTO t VALUES (1)');
 * await scope.commit();
 */
export async function openBuilderTransaction<C extends Record<string, unknown>>(
  tm: TxManager<C>,
  options: BuilderTransactionOptions = {},
): Promise<BuilderTransaction> {
  let started!: (tx: Tx) => void;
  let finish!: (how: 'commit' | 'rollback') => void;
  const opened = new Promise<Tx>((resolve) => {
    started = resolve;
  });
  const finished = new Promise<'commit' | 'rollback'>((resolve) => {
    finish = resolve;
  });
  type Ending = { readonly failed: unknown } | undefined;
  const done: Promise<Ending> = (async () => {
    const result = await tm.do(
      async (tx) => {
        started(tx);
        return (await finished) === 'commit' ? undefined : err(ROLLED_BACK);
      },
      {
        propagation: options.propagation ?? 'required',
        maxAttempts: 1,
        ...(options.isolation === undefined ? {} : { isolation: options.isolation }),
        ...(options.readOnly === undefined ? {} : { readOnly: options.readOnly }),
        ...(options.deferrable === undefined ? {} : { deferrable: options.deferrable }),
      } satisfies TxOptions,
    );
    const error: unknown = result.isErr() ? result.error : ROLLED_BACK;
    if (error === ROLLED_BACK) return undefined;
    // One attempt by design: its failure itself (a SerializationFailure at COMMIT …), not "retries exhausted".
    return { failed: error instanceof RetriesExhausted && error.attempts === 1 ? error.last : error };
  })();
  const first = await Promise.race([opened.then((tx) => ({ tx })), done.then((ending) => ({ ending }))]);
  if (!('tx' in first)) {
    // The transaction ended before the scope opened (BEGIN failed, invalid options).
    throw first.ending?.failed ?? new Error('pg-txkit: the transaction ended before it opened');
  }
  const end = async (how: 'commit' | 'rollback'): Promise<void> => {
    finish(how);
    const ending = await done;
    if (ending !== undefined && how === 'commit') throw ending.failed;
  };
  return { tx: first.tx, commit: () => end('commit'), rollback: () => end('rollback') };
}
