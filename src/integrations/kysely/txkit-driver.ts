import {
  type CompiledQuery,
  createQueryId,
  type DatabaseConnection,
  type Driver,
  IdentifierNode,
  type QueryCompiler,
  RawNode,
  type TransactionSettings,
} from 'kysely';
import { invalid } from '../../errors/parse-options.js';
import type { TxManager } from '../../tx/tx-manager.js';
import type { IsolationLevel } from '../../tx/tx-options.js';
import type { BuilderSettings } from '../shared/builder-options.js';
import { TxKitConnection } from './txkit-connection.js';

/** Kysely's isolation levels the manager runs (PostgreSQL runs 'read uncommitted' as read committed). */
const ISOLATION: Readonly<Record<string, IsolationLevel>> = {
  'read uncommitted': 'read committed',
  'read committed': 'read committed',
  'repeatable read': 'repeatable read',
  serializable: 'serializable',
};

/**
 * Kysely's driver on a `TxManager`: no pool of its own, no BEGIN / COMMIT of its own. Queries go
 * to the caller's transaction inside `tm.do`, outside it to one client of the manager's pool per
 * connection Kysely acquires (see {@link TxKitConnection}); `db.transaction()` and `db.startTransaction()` become a scope of the manager
 * (see {@link kyselyDialect}); savepoints (`trx.savepoint(name)`) are the user's own, sent in the scope.
 *
 * @example
 * const db = new Kysely<Database>({ dialect: kyselyDialect(tm) }); // uses this driver
 */
export class TxKitDriver<C extends Record<string, unknown>> implements Driver {
  readonly #tm: TxManager<C>;
  readonly #settings: BuilderSettings;

  constructor(tm: TxManager<C>, settings: BuilderSettings) {
    this.#tm = tm;
    this.#settings = settings;
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    return new TxKitConnection(this.#tm);
  }

  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const isolation = settings.isolationLevel === undefined ? undefined : ISOLATION[settings.isolationLevel];
    if (settings.isolationLevel !== undefined && isolation === undefined) {
      throw invalid(['isolationLevel'], `PostgreSQL has no isolation level '${settings.isolationLevel}'`);
    }
    await txkit(connection).begin({
      propagation: this.#settings.propagation,
      ...(isolation === undefined ? {} : { isolation }),
      ...(settings.accessMode === undefined ? {} : { readOnly: settings.accessMode === 'read only' }),
    });
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await txkit(connection).end('commit');
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await txkit(connection).end('rollback');
  }

  // The user's own savepoints (`trx.savepoint('a')`), sent in the transaction's scope. SAVEPOINT takes
  // no lock; ROLLBACK TO releases the locks taken since the savepoint; RELEASE keeps them.
  async savepoint(
    connection: DatabaseConnection,
    savepointName: string,
    compileQuery: QueryCompiler['compileQuery'],
  ): Promise<void> {
    await connection.executeQuery(savepointCommand(compileQuery, 'savepoint', savepointName));
  }

  async rollbackToSavepoint(
    connection: DatabaseConnection,
    savepointName: string,
    compileQuery: QueryCompiler['compileQuery'],
  ): Promise<void> {
    await connection.executeQuery(savepointCommand(compileQuery, 'rollback to', savepointName));
  }

  async releaseSavepoint(
    connection: DatabaseConnection,
    savepointName: string,
    compileQuery: QueryCompiler['compileQuery'],
  ): Promise<void> {
    await connection.executeQuery(savepointCommand(compileQuery, 'release', savepointName));
  }

  /** Kysely releases a connection after each plain query and after `db.connection().execute(…)`. */
  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    await txkit(connection).release();
  }

  /** The pool is the manager's (and the application's): `db.destroy()` leaves it open. */
  async destroy(): Promise<void> {}
}

function txkit(connection: DatabaseConnection): TxKitConnection<Record<string, unknown>> {
  if (!(connection instanceof TxKitConnection)) {
    throw new Error("pg-txkit: Kysely passed a connection that pg-txkit's driver did not make");
  }
  return connection;
}

/** `savepoint "name"` compiled by Kysely's own compiler (the name quoted as an identifier), as Kysely's driver does. */
function savepointCommand(
  compileQuery: QueryCompiler['compileQuery'],
  command: 'savepoint' | 'rollback to' | 'release',
  name: string,
): CompiledQuery {
  return compileQuery(
    RawNode.createWithChildren([RawNode.createWithSql(`${command} `), IdentifierNode.create(name)]),
    createQueryId(),
  );
}
