import type pg from 'pg';
import { controlStatements } from '../../tx/transaction-control.js';
import type { TxManager } from '../../tx/tx-manager.js';
import type { IsolationLevel } from '../../tx/tx-options.js';
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
 * for it. Knex's own BEGIN / COMMIT / ROLLBACK never reach the server; its savepoints (nested
 * `trx.transaction()`) are sent in the scope as the user's own.
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
    if (KNEX_BEGIN.test(statement) && this.#scope === undefined) {
      const isolation = ISOLATION.find(([re]) => re.test(statement))?.[1];
      this.#scope = await openBuilderTransaction(this.#tm, {
        propagation: this.#settings.propagation,
        ...(isolation === undefined ? {} : { isolation }),
        ...(/\bread only$/.test(statement) ? { readOnly: true } : {}),
      });
      return commandResult('BEGIN');
    }
    const scope = this.#scope;
    if (scope === undefined && this.#ended && statement === 'rollback') {
      // A ROLLBACK after this connection's transaction already ended (a failed COMMIT): nothing to undo.
      return commandResult('ROLLBACK');
    }
    if (scope !== undefined && (statement === 'commit' || statement === 'rollback')) {
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
