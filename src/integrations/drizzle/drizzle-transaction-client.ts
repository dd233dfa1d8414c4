import type pg from 'pg';
import type { TxManager } from '../../tx/tx-manager.js';
import { TxUsageError } from '../../tx/tx-usage-error.js';
import type { BuilderSettings } from '../shared/builder-options.js';
import { type BuilderTransaction, openBuilderTransaction } from '../shared/builder-transaction.js';
import { beginOptions, isDrizzleBegin } from './begin-options.js';

/** The answer to a statement the manager kept from the server (drizzle's BEGIN / COMMIT / ROLLBACK). */
function kept(command: string): pg.QueryResult {
  return { command, rowCount: null, oid: 0, rows: [], fields: [] };
}

/** pg's config form of a query (what a `Tx` takes beside its values). */
const asConfig = (query: string | pg.QueryConfig): pg.QueryConfig =>
  typeof query === 'string' ? { text: query } : query;

/**
 * What drizzle's node-postgres session gets from `client.connect()` for one `db.transaction(fn, config)`:
 * its `begin …` opens a scope of the manager ({@link openBuilderTransaction}: joined, a SAVEPOINT, or a
 * transaction of its own, per the propagation), every statement of the callback's `tx` runs in that
 * scope, and its `commit` / `rollback` end the scope. None of the three reaches the server as drizzle
 * wrote it: the manager sends (or, for a join, does not send) its own. Internal to `drizzleClient`.
 *
 * @example
 * const client = new DrizzleTransactionClient(tm, { propagation: 'required' });
 * await client.query({ text: 'begin' }, []); // joins tm.current(), sends nothing
 */
export class DrizzleTransactionClient<C extends Record<string, unknown>> {
  readonly #tm: TxManager<C>;
  readonly #settings: BuilderSettings;
  #scope: BuilderTransaction | undefined;
  #begun = false;
  #ended = false;

  constructor(tm: TxManager<C>, settings: BuilderSettings) {
    this.#tm = tm;
    this.#settings = settings;
  }

  /** pg's `query(text | config, values)`, as drizzle calls it. */
  async query(query: string | pg.QueryConfig, values?: readonly unknown[]): Promise<pg.QueryResult> {
    const text = typeof query === 'string' ? query : query.text;
    if (!this.#begun && isDrizzleBegin(text)) {
      this.#begun = true;
      this.#scope = await openBuilderTransaction(this.#tm, {
        ...beginOptions(text),
        propagation: this.#settings.propagation,
      });
      return kept('BEGIN');
    }
    if (this.#begun && (text === 'commit' || text === 'rollback')) {
      // drizzle sends its rollback also after a commit that failed: the scope has ended by then.
      if (this.#scope !== undefined && !this.#ended) {
        this.#ended = true;
        await (text === 'commit' ? this.#scope.commit() : this.#scope.rollback());
      }
      return kept(text === 'commit' ? 'COMMIT' : 'ROLLBACK');
    }
    if (this.#scope !== undefined && !this.#ended) return this.#scope.tx.query(asConfig(query), values);
    if (this.#begun) {
      throw new TxUsageError(
        'transaction-closed',
        "a statement of drizzle's transaction was sent after it ended; use its tx only inside its callback",
      );
    }
    return this.#tm.db().query(asConfig(query), values);
  }

  /**
   * drizzle gives the client back after its COMMIT / ROLLBACK; a scope still open (drizzle sent
   * neither) is rolled back. Nobody awaits this: a failure of that rollback is the manager's to report
   * (its `onRollback` hook), never an unhandled rejection.
   */
  release(): void {
    if (this.#scope !== undefined && !this.#ended) {
      this.#ended = true;
      this.#scope.rollback().catch(() => {});
    }
  }
}
