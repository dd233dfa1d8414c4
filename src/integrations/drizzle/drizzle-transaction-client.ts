import type pg from 'pg';
import type { TxManager } from '../../tx/tx-manager.js';
import type { Propagation } from '../../tx/tx-options.js';
import { TxUsageError } from '../../tx/tx-usage-error.js';
import { ScopeBridge } from '../shared/scope-bridge.js';
import { beginOptions, isDrizzleBegin } from './begin-options.js';

/** Propagations a drizzle `transaction()` can take (see {@link DrizzleClientOptions.propagation}). */
export type DrizzlePropagation = Extract<Propagation, 'required' | 'nested' | 'mandatory'>;

/** The answer to a statement the manager kept from the server (drizzle's BEGIN / COMMIT / ROLLBACK). */
function kept(command: string): pg.QueryResult {
  return { command, rowCount: null, oid: 0, rows: [], fields: [] };
}

/**
 * What drizzle's node-postgres session gets from `client.connect()` for one `db.transaction(fn, config)`:
 * its `begin …` opens a scope of the manager (joined, a SAVEPOINT, or a transaction of its own, per
 * the propagation), every statement of the callback's `tx` runs in that scope, and its `commit` /
 * `rollback` end the scope. None of the three reaches the server as drizzle wrote it: the manager
 * sends (or, for a join, does not send) its own. Internal to `drizzleClient`.
 *
 * @example
 * const client = new DrizzleTransactionClient(tm, 'required');
 * await client.query({ text: 'begin' }, []); // joins tm.current(), sends nothing
 */
export class DrizzleTransactionClient<C extends Record<string, unknown>> {
  readonly #tm: TxManager<C>;
  readonly #propagation: DrizzlePropagation;
  readonly #bridge: ScopeBridge<C>;
  #begun = false;

  constructor(tm: TxManager<C>, propagation: DrizzlePropagation) {
    this.#tm = tm;
    this.#propagation = propagation;
    this.#bridge = new ScopeBridge(tm);
  }

  /** pg's `query(text | config, values)`, as drizzle calls it. */
  async query(config: string | pg.QueryConfig, values?: readonly unknown[]): Promise<pg.QueryResult> {
    const text = typeof config === 'string' ? config : config.text;
    if (!this.#begun && isDrizzleBegin(text)) {
      this.#begun = true;
      // Outside tm.do: one attempt, no retries (drizzle owns the callback; only tm.do can run it again).
      await this.#bridge.open({
        ...beginOptions(text),
        propagation: this.#propagation,
        maxAttempts: 1,
        retryOn: [],
      });
      return kept('BEGIN');
    }
    if (this.#begun && (text === 'commit' || text === 'rollback')) {
      await this.#bridge.end(text);
      return kept(text === 'commit' ? 'COMMIT' : 'ROLLBACK');
    }
    const tx = this.#bridge.tx;
    if (tx !== undefined) return tx.query(typeof config === 'string' ? { text: config } : config, values);
    if (this.#begun) {
      throw new TxUsageError(
        'transaction-closed',
        "a statement of drizzle's transaction was sent after it ended; use its tx only inside its callback",
      );
    }
    return this.#tm.db().query(typeof config === 'string' ? { text: config } : config, values);
  }

  /** drizzle gives the client back after COMMIT / ROLLBACK; a scope still open is rolled back. */
  release(): void {
    if (this.#begun && !this.#bridge.ended) void this.#bridge.end('rollback');
  }
}
