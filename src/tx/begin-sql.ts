import type { TxSettings } from './tx-options.js';

/** The parts of {@link TxSettings} that shape the BEGIN round trip. */
export type BeginSettings = Pick<
  TxSettings,
  'isolation' | 'readOnly' | 'deferrable' | 'lockTimeout' | 'statementTimeout' | 'idleInTransactionTimeout'
>;

const ISOLATION_SQL: Readonly<Record<TxSettings['isolation'], string>> = {
  'read committed': 'READ COMMITTED',
  'repeatable read': 'REPEATABLE READ',
  serializable: 'SERIALIZABLE',
};

function integerMs(name: string, value: number): string {
  // Defence in depth: the schema already guarantees this. A non-integer here is a bug, never SQL.
  if (!Number.isSafeInteger(value) || value < 1 || value > 2_147_483_647) {
    throw new TypeError(`${name} must be an integer number of milliseconds, got ${String(value)}`);
  }
  return String(value);
}

/**
 * Builds the text that opens a transaction: `BEGIN` with isolation level, access mode and
 * DEFERRABLE, followed by one `SET LOCAL` per timeout. It is sent as ONE simple-protocol query (one
 * round trip). Only fixed keywords and validated integers appear in it, never caller strings.
 *
 * Locks: BEGIN takes none; the snapshot of repeatable read / serializable is taken by the first
 * statement after it. `SET LOCAL` ends with the transaction, so a pooled connection never keeps a
 * timeout meant for one transaction.
 *
 * @example
 * beginSql({ isolation: 'serializable', readOnly: true, deferrable: true, lockTimeout: 500 });
 * // 'BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE; SET LOCAL lock_timeout = 500'
 */
export function beginSql(settings: BeginSettings): string {
  return beginStatements(settings).join('; ');
}

/**
 * The statements of {@link beginSql}, one by one: what the first flight of an attempt sends as
 * extended-protocol messages ahead of the callback's first statement, in one round trip.
 *
 * @example
 * beginStatements({ isolation: 'read committed', readOnly: false, deferrable: false, lockTimeout: 500 });
 * // ['BEGIN ISOLATION LEVEL READ COMMITTED', 'SET LOCAL lock_timeout = 500']
 */
export function beginStatements(settings: BeginSettings): string[] {
  const isolation = ISOLATION_SQL[settings.isolation];
  if (isolation === undefined) throw new TypeError(`unknown isolation level ${String(settings.isolation)}`);
  let begin = `BEGIN ISOLATION LEVEL ${isolation}`;
  if (settings.readOnly) begin += ' READ ONLY';
  if (settings.deferrable) begin += ' DEFERRABLE';
  const statements = [begin];
  // SET LOCAL <setting> = <integer>: plain integers are milliseconds for these three settings.
  if (settings.lockTimeout !== undefined) {
    statements.push(`SET LOCAL lock_timeout = ${integerMs('lockTimeout', settings.lockTimeout)}`);
  }
  if (settings.statementTimeout !== undefined) {
    statements.push(
      `SET LOCAL statement_timeout = ${integerMs('statementTimeout', settings.statementTimeout)}`,
    );
  }
  if (settings.idleInTransactionTimeout !== undefined) {
    statements.push(
      `SET LOCAL idle_in_transaction_session_timeout = ${integerMs(
        'idleInTransactionTimeout',
        settings.idleInTransactionTimeout,
      )}`,
    );
  }
  return statements;
}
