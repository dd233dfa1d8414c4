/** A result set as the server sent it: column names and text values (`null` for SQL NULL). */
export interface FormatResultSetInput {
  /** Column names, in order. */
  readonly columns: readonly string[];
  /** One array per row, one text value (or null) per column. */
  readonly values: readonly (readonly (string | null)[])[];
}

/** libpq's test for a numeric-looking column: only `0-9 . E e space -`, not starting with E, ending in a digit. */
function looksNumeric(value: string): boolean {
  if (value.startsWith('E') || value.startsWith('e')) return false;
  if (!/^[0-9.Ee -]*$/.test(value)) return false;
  const last = value.charAt(value.length - 1);
  return last >= '0' && last <= '9';
}

/** Pads to `width` bytes (libpq counts bytes, not characters), left or right. */
function pad(text: string, width: number, left: boolean): string {
  const fill = ' '.repeat(Math.max(0, width - Buffer.byteLength(text)));
  return left ? text + fill : fill + text;
}

/**
 * Renders a result set exactly as PostgreSQL's isolation tester prints it (libpq's `PQprint` with
 * `header`, `align` and `fieldSep = '|'`): a header line, a `--+---` border, one line per row, then
 * `(N rows)` and a blank line. A column is right-aligned when every non-empty value looks numeric;
 * NULL and empty values print as nothing. No columns: nothing at all.
 *
 * @example
 * formatResultSet({ columns: ['id', 'data'], values: [['1', 'foo']] });
 * // 'id|data\n--+----\n 1|foo \n(1 row)\n\n'
 */
export function formatResultSet(result: FormatResultSetInput): string {
  const { columns, values } = result;
  if (columns.length === 0) return '';
  const widths = columns.map((name) => Buffer.byteLength(name));
  const numeric = columns.map(() => true);
  for (const row of values) {
    columns.forEach((_, j) => {
      const value = row[j];
      if (value === null || value === undefined || value === '') return;
      if (numeric[j] && !looksNumeric(value)) numeric[j] = false;
      widths[j] = Math.max(widths[j] as number, Buffer.byteLength(value));
    });
  }
  const line = (cells: readonly string[]): string =>
    cells.map((cell, j) => pad(cell, widths[j] as number, !numeric[j])).join('|');
  const border = widths.map((w) => '-'.repeat(w)).join('+');
  const rows = values.map((row) => `${line(columns.map((_, j) => row[j] ?? ''))}\n`).join('');
  const count = values.length;
  return `${line(columns)}\n${border}\n${rows}(${count} row${count === 1 ? '' : 's'})\n\n`;
}
