import { err, ok } from 'neverthrow';
import type { TxManager } from '../../tx/tx-manager.js';
import type { TxOptions } from '../../tx/tx-options.js';
import type { Tx } from '../../tx/types.js';

/** What a builder asked its transaction to end with. */
export type ScopeEnd = 'commit' | 'rollback';

/** How the manager finished a bridged scope. */
type Outcome = { readonly ok: true } | { readonly ok: false; readonly error: unknown };

/** The `Err` a bridged scope returns when its builder rolled it back (never seen by a user). */
const ROLLED_BACK: unique symbol = Symbol('pg-txkit.builder-rollback');

/**
 * A builder's own transaction (drizzle's `db.transaction()`, Prisma's `$transaction()`) run as a scope
 * of the manager. A builder does not hand its callback over: it says "begin", runs the callback, then
 * says "commit" or "rollback". The bridge turns that into one `tm.do` whose callback waits for the end:
 * - {@link ScopeBridge.open} calls `tm.do(…, options)` and resolves with the scope's {@link Tx} once the
 *   manager entered it (joined the active transaction, opened a SAVEPOINT, or sent BEGIN); when the
 *   manager refuses first (invalid options, `mandatory` outside a transaction, a doomed outer
 *   transaction, BEGIN failed) it rejects with that error and nothing else runs;
 * - {@link ScopeBridge.end} lets the callback return (`ok` to commit, an internal `err` to roll back)
 *   and resolves once the manager finished the scope (RELEASE / COMMIT sent, or nothing for a join),
 *   rejecting with the manager's error when that failed.
 * The builder's BEGIN / COMMIT / ROLLBACK text is never sent: the manager owns them.
 *
 * @example
 * const bridge = new ScopeBridge(tm);
 * const tx = await bridge.open({ propagation: 'nested' });
 * await tx.query('INSERT INTO t VALUES (1)');
 * await bridge.end('commit');
 */
export class ScopeBridge<C extends Record<string, unknown>> {
  readonly #tm: TxManager<C>;
  #tx: Tx | undefined;
  #finish: ((end: ScopeEnd) => void) | undefined;
  #done: Promise<Outcome> | undefined;
  #ended = false;

  constructor(tm: TxManager<C>) {
    this.#tm = tm;
  }

  /** The scope's transaction, once open and until ended. */
  get tx(): Tx | undefined {
    return this.#ended ? undefined : this.#tx;
  }

  /** Has the scope ended (or failed to open)? */
  get ended(): boolean {
    return this.#ended;
  }

  /** Enters a scope of the manager with `options`; resolves with its transaction. */
  open(options: TxOptions): Promise<Tx> {
    if (this.#done !== undefined)
      return Promise.reject(new Error('pg-txkit: builder transaction opened twice'));
    let entered!: (tx: Tx) => void;
    const opened = new Promise<Tx>((resolve) => {
      entered = resolve;
    });
    const finished = new Promise<ScopeEnd>((resolve) => {
      this.#finish = resolve;
    });
    const done = Promise.resolve(
      this.#tm.do(async (tx) => {
        entered(tx);
        return (await finished) === 'commit' ? ok(undefined) : err(ROLLED_BACK);
      }, options),
    ).then(
      (result): Outcome => (result.isOk() ? { ok: true } : { ok: false, error: result.error }),
      (error: unknown): Outcome => ({ ok: false, error }),
    );
    this.#done = done;
    return Promise.race([opened, done]).then((first: Tx | Outcome) => {
      if ('query' in first) {
        this.#tx = first;
        return first;
      }
      this.#ended = true;
      throw first.ok ? new Error('pg-txkit: builder transaction ended before it opened') : first.error;
    });
  }

  /**
   * Ends the scope: `commit` returns from the manager's callback (RELEASE SAVEPOINT / COMMIT / nothing
   * for a join), `rollback` returns an `Err` (ROLLBACK TO SAVEPOINT / ROLLBACK / nothing for a join).
   * A commit rejects with the manager's error when the scope could not commit; a rollback never rejects
   * (the builder is rethrowing the callback's error, which must reach the caller unchanged; a failure of
   * the manager's own ROLLBACK is handled and reported by the manager). A second end is a no-op (a
   * builder sends ROLLBACK after a COMMIT that failed).
   */
  async end(how: ScopeEnd): Promise<void> {
    if (this.#ended || this.#done === undefined) return;
    this.#ended = true;
    this.#finish?.(how);
    const done = await this.#done;
    if (done.ok || how === 'rollback') return;
    throw done.error;
  }
}
