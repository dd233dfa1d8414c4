/**
 * Query text shaping for reports: literal redaction and truncation. Pure functions, no database.
 */

/**
 * Replaces every literal of a SQL text with `$?`: string literals (`'…'`, `E'…'`, `U&'…'`, `B'…'`,
 * `X'…'`), dollar-quoted strings (`$$…$$`, `$tag$…$tag$`) and numbers. Identifiers (`"quoted"` too),
 * keywords and parameters (`$1`) are kept, so the shape of the query stays readable while values
 * (emails, tokens, amounts) do not leave the database. Comments are removed (they may hold data too).
 * `standardStrings` is the session's `standard_conforming_strings` (default on); off, a backslash
 * escapes the next character inside a plain `'…'` literal too, which moves where literals end.
 *
 * @example
 * redactQuery("UPDATE users SET email = 'a@b.c' WHERE id = 42");
 * // → 'UPDATE users SET email = $? WHERE id = $?'
 */
export function redactQuery(sql: string, standardStrings = true): string {
  let out = '';
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i] as string;
    const next = sql[i + 1];
    // -- line comment
    if (c === '-' && next === '-') {
      const end = sql.indexOf('\n', i);
      i = end === -1 ? n : end;
      continue;
    }
    // /* block comment */ (nesting allowed in PostgreSQL)
    if (c === '/' && next === '*') {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        if (sql[i] === '/' && sql[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (sql[i] === '*' && sql[i + 1] === '/') {
          depth--;
          i += 2;
        } else i++;
      }
      out += ' ';
      continue;
    }
    // "quoted identifier": kept as is
    if (c === '"') {
      const end = skipQuoted(sql, i, '"');
      out += sql.slice(i, end);
      i = end;
      continue;
    }
    // string literal with an optional prefix (E, B, X, N, U&)
    const prefix = /^(?:[eEbBxXnN]|[uU]&)'/.exec(sql.slice(i, i + 3));
    if ((prefix && !isIdentChar(sql[i - 1])) || c === "'") {
      const start = prefix ? i + prefix[0].length - 1 : i;
      // E'…' always takes backslash escapes; a plain or N'…' one too when `standardStrings` is off.
      const letter = prefix?.[0][0]?.toLowerCase();
      const backslashes = letter === 'e' || ((letter === undefined || letter === 'n') && !standardStrings);
      i = skipString(sql, start, backslashes);
      out += '$?';
      continue;
    }
    // dollar quoting: $$…$$ or $tag$…$tag$ (a $1 parameter is kept)
    if (c === '$' && !isIdentChar(sql[i - 1])) {
      const tag = /^\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/.exec(sql.slice(i));
      if (tag) {
        const end = sql.indexOf(tag[0], i + tag[0].length);
        i = end === -1 ? n : end + tag[0].length;
        out += '$?';
        continue;
      }
      const param = /^\$\d+/.exec(sql.slice(i));
      if (param) {
        out += param[0];
        i += param[0].length;
        continue;
      }
    }
    // numbers that are not part of an identifier
    if (/[0-9]/.test(c) || (c === '.' && next !== undefined && /[0-9]/.test(next))) {
      if (!isIdentChar(sql[i - 1])) {
        const num =
          /^(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?)/.exec(
            sql.slice(i),
          );
        const len = num?.[0].length ?? 1;
        out += '$?';
        i += len;
        continue;
      }
    }
    out += c;
    i++;
  }
  return out.replace(/[ \t]+\n/g, '\n').trim();
}

/**
 * Collapses whitespace and cuts a query to `maxLength` characters (an ellipsis marks the cut).
 *
 * @example
 * truncateQuery('SELECT   *\n  FROM t', 10); // → 'SELECT * …'
 */
export function truncateQuery(sql: string, maxLength: number): string {
  const flat = sql.replace(/\s+/g, ' ').trim();
  if (flat.length <= maxLength) return flat;
  return `${flat.slice(0, Math.max(0, maxLength - 1))}…`;
}

function isIdentChar(ch: string | undefined): boolean {
  return ch !== undefined && /[A-Za-z0-9_$\u0080-\uffff]/.test(ch);
}

/** Index just past a quoted run starting at `start` where the quote doubles to escape itself. */
function skipQuoted(sql: string, start: number, quote: string): number {
  let i = start + 1;
  while (i < sql.length) {
    if (sql[i] === quote) {
      if (sql[i + 1] === quote) i += 2;
      else return i + 1;
    } else i++;
  }
  return sql.length;
}

function skipString(sql: string, start: number, backslashes: boolean): number {
  let i = start + 1;
  while (i < sql.length) {
    const ch = sql[i];
    if (backslashes && ch === '\\') i += 2;
    else if (ch === "'") {
      if (sql[i + 1] === "'") i += 2;
      else return i + 1;
    } else i++;
  }
  return sql.length;
}
