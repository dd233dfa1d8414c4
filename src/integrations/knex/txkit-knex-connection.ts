import type pg from 'pg';
import { controlStatements } from '../../tx/transaction-control.js';
import type { TxManager } from '../../tx/tx-manager.js';
import type { IsolationLevel } from '../../tx/tx-options.js';
import { TxUsageError } from '../../tx/tx-usage-error.js';
import type { BuilderSettings } from '../shared/builder-options.js';
import { type BuilderTransaction, openBuilderTransaction } from '../shared/builder-transaction.js';

type Callback = (error: Error | null, result?: pg.QueryResult) => void;

/** Knex's BEGIN (its PostgreSQL transaction: `BEGIN;` or `BEGIN TRANSACTION ISOLATION LEVEL … READ ONLY;`). */
const KNEX_BEGIN = /^begin(?: transaction(?: isolation level [a-z ]+?)?(?: read only)?)?$/;

/** Knex's isolation levels the manager runs (PostgreSQL runs 'read uncommitted' as read committed). */
const ISOLATION: readonly (readonly [RegExp, IsolationLevel])[] = [
  [/isolation level read uncommitted/i, 'read committed'],
  [/isolation level read committed/i, 'read committed'],
  [/isolation level repeatable read/i, 'repeatable read'],
  [/isolation level serializable/i, 'serializable'],
];

/**
 * What Knex's PostgreSQL client takes for a pg connection, without one: each query goes to `tm.db()`
 * when it runs (the caller's transaction inside `tm.do`, the pool outside), and between the BEGIN
 * and the COMMIT / ROLLBACK of a Knex transaction on this connection, to the scope the manager opened
 * for it. Knex's own BEGIN / COMMIT / ROLLBACK (sent while Knex runs a transaction on this
 * connection) never reach the server; its savepoints (nested `trx.transaction()`) are sent in the scope
 * as the user's own. A raw BEGIN / COMMIT / ROLLBACK (`db.raw('BEGIN')`) is refused before it is sent.
 *
 * @example
 * // Made by knexConfig's client for Knex; a user never constructs one:
 * const db = knex(knexConfig(tm));
 */
export class TxKitKnexConnection<C extends Record<string, unknown>> {
  readonly #tm: TxManager<C>;
  readonly #settings: BuilderSettings;
  #scope: BuilderTransaction | undefined;
  /** This connection's transaction has ended. */
  #ended = false;
  /**
   * Knex sets this on the connection a transaction of its own runs on, before it sends the BEGIN, and
   * deletes it when the transaction has ended (knex/lib/execution/transaction.js, acquireConnection):
   * only then is a BEGIN / COMMIT / ROLLBACK Knex's own rather than the user's raw SQL.
   */
  declare __knexTxId?: string;

  constructor(tm: TxManager<C>, settings: BuilderSettings) {
    this.#tm = tm;
    this.#settings = settings;
  }

  /** pg's callback `query`, as Knex's `_query` calls it. */
  query(config: pg.QueryConfig, callback: Callback): void {
    if (typeof (config as { submit?: unknown }).submit === 'function') {
      // Knex's .stream() hands pg a QueryStream: a cursor would hold the transaction's client between reads.
      throw new Error(
        "pg-txkit's Knex client does not stream (.stream()): a cursor would hold the transaction's client " +
          'between reads. Page with limit/offset or keyset pagination instead.',
      );
    }
    this.#run(config).then(
      (result) => callback(null, result),
      (error: unknown) => callback(error instanceof Error ? error : new Error(String(error))),
    );
  }

  async #run(config: pg.QueryConfig): Promise<pg.QueryResult> {
    // Knex's own BEGIN / COMMIT / ROLLBACK of a transaction, exactly as Knex writes them, arrive alone;
    // anything else goes on (and transaction control inside tm.do is refused there before it is sent).
    const statements = controlStatements(config.text);
    const control = statements.length === 1 ? statements[0] : undefined;
    const statement = control?.type === 'control' ? control.statement.toLowerCase() : '';
    // Knex's BEGIN is its own only while Knex runs a transaction on this connection (__knexTxId); its
    // COMMIT / ROLLBACK, while the scope that BEGIN opened is open (a nested trx.transaction() deletes
    // __knexTxId when it ends, before the outer transaction's COMMIT).
    const knexTransaction = this.__knexTxId !== undefined;
    const scope = this.#scope;
    const knexBegin = knexTransaction && scope === undefined && KNEX_BEGIN.test(statement);
    const knexEnd = scope !== undefined && (statement === 'commit' || statement === 'rollback');
    // A ROLLBACK after this connection's transaction already ended (a failed COMMIT): nothing to undo.
    const lateRollback = knexTransaction && scope === undefined && this.#ended && statement === 'rollback';
    if (!knexBegin && !knexEnd && !lateRollback && scope === undefined && this.#tm.current() === undefined) {
      // Raw BEGIN / COMMIT / ROLLBACK through knex.raw outside tm.do, refused before it is sent: on the
      // pool, a BEGIN would pin a client that nothing ever ends. (Inside tm.do, and inside a Knex
      // transaction's scope, the manager's transaction refuses it before it is sent.)
      const refused = statements.find((s) => s.type === 'control');
      if (refused !== undefined) {
        throw new TxUsageError(
          'transaction-control',
          `a statement sent through knex.raw would start or end a transaction (${JSON.stringify(refused.statement)}); ` +
            "nothing was sent. Use Knex's db.transaction() or tm.do for a transaction.",
        );
      }
    }
    if (knexBegin) {
      const isolation = ISOLATION.find(([re]) => re.test(statement))?.[1];
      this.#scope = await openBuilderTransaction(this.#tm, {
        propagation: this.#settings.propagation,
        ...(isolation === undefined ? {} : { isolation }),
        ...(/\bread only$/.test(statement) ? { readOnly: true } : {}),
      });
      return commandResult('BEGIN');
    }
    if (lateRollback) return commandResult('ROLLBACK');
    if (knexEnd) {
      this.#ended = true;
      this.#scope = undefined;
      await (statement === 'commit' ? scope.commit() : scope.rollback());
      return commandResult(statement === 'commit' ? 'COMMIT' : 'ROLLBACK');
    }
    const db = this.#scope?.tx ?? this.#tm.db();
    return db.query(config);
  }
}

/** The result pg gives a transaction-control statement. */
function commandResult(command: string): pg.QueryResult {
  return { command, rowCount: null, oid: 0, rows: [], fields: [] };
}
