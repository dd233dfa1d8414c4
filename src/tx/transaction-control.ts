import { redactQuery } from '../diagnostics/redact-query.js';

/**
 * What a statement of a SQL string does to the transaction it runs in, as far as the manager cares:
 * - `'control'`: it would start or end a transaction (BEGIN, START TRANSACTION, COMMIT, END, ROLLBACK
 *   without TO, ABORT, PREPARE TRANSACTION, COMMIT / ROLLBACK PREPARED, any of them AND CHAIN);
 * - `'savepoint'`, `'release'`, `'rollback-to'`: the user's own savepoint statements, with the
 *   savepoint's name as PostgreSQL resolves it (unquoted names folded to lower case);
 * - nothing, for every other statement.
 */
export type ControlStatement =
  | { readonly type: 'control'; readonly statement: string }
  | {
      readonly type: 'savepoint' | 'release' | 'rollback-to';
      readonly statement: string;
      readonly name: string;
    };

/** First words of statements that may control the transaction; any other first word needs no lexing. */
const CONTROL_WORDS = new Set([
  'begin',
  'start',
  'commit',
  'end',
  'abort',
  'rollback',
  'prepare',
  'savepoint',
  'release',
]);

/** A token of a statement's head: a keyword or unquoted identifier (lower-cased), or a quoted name. */
interface Token {
  readonly word: string;
  /** A double-quoted identifier: `word` is its name as written, never a keyword. */
  readonly quoted: boolean;
}

/** How many leading tokens of a statement decide what it is (`ROLLBACK WORK TO SAVEPOINT name`). */
const HEAD_TOKENS = 5;

/** A quoted identifier, a word, or any other single character. */
const TOKEN = /"(?:[^"]|"")*"?|[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*|\S/g;

const isSpace = (c: number): boolean => c === 32 || (c >= 9 && c <= 13);
/** PostgreSQL identifier start: a letter, `_`, or any non-ASCII character. */
const isIdentStart = (c: number): boolean =>
  (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95 || c >= 128;
const isIdentPart = (c: number): boolean => isIdentStart(c) || (c >= 48 && c <= 57) || c === 36;

/**
 * The statements of `sql` that start or end a transaction or touch a savepoint, in order. The text
 * is lexed by {@link redactQuery} (string literals, E'' / U&'' / B'' / X'' strings, dollar quotes and
 * comments — nested `/* *\/` too — taken out of the way; quoted identifiers kept), split at the `;`
 * that remain, and the first words of each statement decide. So `SELECT 'commit'`, a DO block that
 * mentions COMMIT and a column named "end" are not transaction control, and `INSERT …; COMMIT` is.
 * The server reads literals with the session's `standard_conforming_strings`: the text is read with
 * it on and off, and a transaction-control statement either reading finds counts.
 *
 * @example
 * controlStatements("INSERT INTO t VALUES ('a;b'); /* note *\/ commit");
 * // [{ type: 'control', statement: 'commit' }]
 * controlStatements('ROLLBACK TO SAVEPOINT "Mine"');
 * // [{ type: 'rollback-to', statement: 'ROLLBACK TO SAVEPOINT "Mine"', name: 'Mine' }]
 */
export function controlStatements(sql: string): ControlStatement[] {
  if (!mayControl(sql)) return [];
  const found = statementsOf(redactQuery(sql, true));
  if (found.some((s) => s.type === 'control')) return found;
  const other = statementsOf(redactQuery(sql, false)).find((s) => s.type === 'control');
  return other === undefined ? found : [other];
}

function statementsOf(redacted: string): ControlStatement[] {
  const found: ControlStatement[] = [];
  for (const raw of redacted.split(';')) {
    const statement = raw.replace(/\s+/g, ' ').trim();
    if (statement === '') continue;
    const head: Token[] = [];
    for (const m of statement.matchAll(TOKEN)) {
      const text = m[0];
      head.push(
        text.startsWith('"')
          ? {
              word: text
                .slice(1, text.endsWith('"') && text.length > 1 ? -1 : undefined)
                .replaceAll('""', '"'),
              quoted: true,
            }
          : { word: text.toLowerCase(), quoted: false },
      );
      if (head.length === HEAD_TOKENS) break;
    }
    const decided = decide(head, statement);
    if (decided !== undefined) found.push(decided);
  }
  return found;
}

/**
 * The fast path: a single statement (no `;`, no comment) whose first word cannot control the
 * transaction needs no lexing. Anything else is lexed.
 */
function mayControl(sql: string): boolean {
  let i = 0;
  const n = sql.length;
  while (i < n && isSpace(sql.charCodeAt(i))) i++;
  if (!isIdentStart(sql.charCodeAt(i))) return true;
  let j = i + 1;
  while (j < n && isIdentPart(sql.charCodeAt(j))) j++;
  if (CONTROL_WORDS.has(sql.slice(i, j).toLowerCase())) return true;
  return sql.includes(';') || sql.includes('--') || sql.includes('/*');
}

/** What a statement whose first tokens are `head` is (see {@link ControlStatement}). */
function decide(head: readonly Token[], statement: string): ControlStatement | undefined {
  const word = (k: number): string | undefined => {
    const token = head[k];
    return token === undefined || token.quoted ? undefined : token.word;
  };
  const name = (k: number): string | undefined => head[k]?.word;
  const first = word(0);
  switch (first) {
    case 'begin':
    case 'commit':
    case 'end':
    case 'abort':
      return { type: 'control', statement };
    case 'start':
      return word(1) === 'transaction' ? { type: 'control', statement } : undefined;
    case 'prepare':
      return word(1) === 'transaction' ? { type: 'control', statement } : undefined;
    case 'rollback': {
      let k = 1;
      if (word(k) === 'work' || word(k) === 'transaction') k++;
      if (word(k) !== 'to') return { type: 'control', statement };
      k++;
      if (word(k) === 'savepoint') k++;
      return { type: 'rollback-to', statement, name: name(k) ?? '' };
    }
    case 'savepoint':
      return { type: 'savepoint', statement, name: name(1) ?? '' };
    case 'release': {
      const k = word(1) === 'savepoint' ? 2 : 1;
      return { type: 'release', statement, name: name(k) ?? '' };
    }
    default:
      return undefined;
  }
}
