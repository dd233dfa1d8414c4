import { redactQuery } from './redact-query.js';

/** What {@link inspectDdl} found out about a DDL text. */
export interface DdlInspection {
  /** Number of statements (split on `;` outside literals and comments). */
  readonly statements: number;
  /** Why it cannot run inside a transaction block (e.g. 'CREATE INDEX CONCURRENTLY'), or null. */
  readonly nonTransactional: string | null;
  /** A transaction-control statement found (BEGIN, COMMIT …): safeDdl manages the transaction itself. */
  readonly transactionControl: string | null;
  /** For CREATE INDEX CONCURRENTLY: the index name as written (quoted or not), null when unnamed. */
  readonly concurrentIndexName: string | null;
  /** For CREATE INDEX CONCURRENTLY on a schema-qualified table: that schema as written, else null. */
  readonly concurrentIndexSchema: string | null;
}

const IDENT = String.raw`(?:"(?:[^"]|"")+"|[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*)`;

/** Statements PostgreSQL refuses inside a transaction block ("cannot run inside a transaction block"). */
const NON_TRANSACTIONAL: readonly (readonly [RegExp, string])[] = [
  [/^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\b/i, 'CREATE INDEX CONCURRENTLY'],
  [/^DROP\s+INDEX\s+CONCURRENTLY\b/i, 'DROP INDEX CONCURRENTLY'],
  [/^REINDEX\b.*\bCONCURRENTLY\b/i, 'REINDEX CONCURRENTLY'],
  [/^REINDEX\s+(?:\([^)]*\)\s*)?(?:SYSTEM|DATABASE)\b/i, 'REINDEX SYSTEM/DATABASE'],
  [
    /^ALTER\s+TABLE\b.*\bDETACH\s+PARTITION\b.*\bCONCURRENTLY\b/i,
    'ALTER TABLE … DETACH PARTITION … CONCURRENTLY',
  ],
  [/^VACUUM\b/i, 'VACUUM'],
  [/^CLUSTER\s*$/i, 'CLUSTER without a table'],
  [/^ALTER\s+SYSTEM\b/i, 'ALTER SYSTEM'],
  [/^(?:CREATE|DROP)\s+DATABASE\b/i, 'CREATE/DROP DATABASE'],
  [/^ALTER\s+DATABASE\b.*\bSET\s+TABLESPACE\b/i, 'ALTER DATABASE … SET TABLESPACE'],
  [/^(?:CREATE|DROP)\s+TABLESPACE\b/i, 'CREATE/DROP TABLESPACE'],
  [/^(?:CREATE|DROP)\s+SUBSCRIPTION\b/i, 'CREATE/DROP SUBSCRIPTION'],
];

const TRANSACTION_CONTROL =
  /^(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|ABORT|SAVEPOINT|RELEASE|PREPARE\s+TRANSACTION)\b/i;

const CONCURRENT_INDEX = new RegExp(
  String.raw`^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?(?!ON\b)(${IDENT})?\s*ON\s+(?:ONLY\s+)?(${IDENT})(?:\s*\.\s*(${IDENT}))?`,
  'i',
);

/**
 * Looks at a DDL text without a database: how many statements, whether it can run in a transaction
 * block, whether it controls transactions itself, and the name of a concurrently built index.
 *
 * The text is read twice, with `standard_conforming_strings` on and off: the server reads it with the
 * session's setting (a role, a database or a connection option may turn it off), and a text that
 * hides a COMMIT inside a literal under one reading runs it under the other. What either reading
 * finds counts.
 *
 * @example
 * inspectDdl('CREATE INDEX CONCURRENTLY orders_user_idx ON orders (user_id)').nonTransactional;
 * // → 'CREATE INDEX CONCURRENTLY'
 */
export function inspectDdl(sql: string): DdlInspection {
  let statements = 0;
  let nonTransactional: string | null = null;
  let transactionControl: string | null = null;
  for (const standardStrings of [true, false]) {
    // Literals and comments out of the way: `;` or keywords inside them do not count.
    const found = redactQuery(sql, standardStrings)
      .split(';')
      .map((s) => s.replace(/\s+/g, ' ').trim())
      .filter((s) => s.length > 0);
    statements = Math.max(statements, found.length);
    for (const s of found) {
      nonTransactional ??= NON_TRANSACTIONAL.find(([re]) => re.test(s))?.[1] ?? null;
      transactionControl ??= TRANSACTION_CONTROL.exec(s)?.[1]?.toUpperCase() ?? null;
    }
  }
  // The index name is read from the original text (redaction keeps identifiers, but be exact).
  const flat = sql
    .replace(/--[^\n]*/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  const m = CONCURRENT_INDEX.exec(flat);
  const hasSchema = m?.[3] !== undefined;
  return {
    statements,
    nonTransactional,
    transactionControl,
    concurrentIndexName: m?.[1] ?? null,
    concurrentIndexSchema: hasSchema ? (m?.[2] ?? null) : null,
  };
}

/**
 * Unquotes an identifier as PostgreSQL would: `"Mixed"` keeps its case, a bare name folds to lower case.
 *
 * @example
 * unquoteIdentifier('"Orders_Idx"'); // → 'Orders_Idx'
 * unquoteIdentifier('Orders_Idx'); // → 'orders_idx'
 */
export function unquoteIdentifier(ident: string): string {
  return ident.startsWith('"') ? ident.slice(1, -1).replace(/""/g, '"') : ident.toLowerCase();
}
