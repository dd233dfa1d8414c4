/** A column of {@link renderTable}. */
export interface Column {
  readonly header: string;
  /** 'right' for numbers. */
  readonly align?: 'left' | 'right';
}

/**
 * Renders rows as a plain-text table with a header rule. Cells are strings; widths fit the content.
 * (Colors are applied by the caller after padding would miscount: pass plain text.)
 *
 * @example
 * renderTable([{ header: 'scenario' }, { header: 'ops/s', align: 'right' }], [['seats', '1200']]);
 */
export function renderTable(columns: readonly Column[], rows: readonly (readonly string[])[]): string {
  const widths = columns.map((c, i) => Math.max(c.header.length, ...rows.map((r) => (r[i] ?? '').length)));
  const pad = (text: string, i: number) =>
    columns[i]?.align === 'right' ? text.padStart(widths[i] ?? 0) : text.padEnd(widths[i] ?? 0);
  const line = (cells: readonly string[]) =>
    columns
      .map((_, i) => pad(cells[i] ?? '', i))
      .join('  ')
      .trimEnd();
  return [
    line(columns.map((c) => c.header)),
    widths.map((w) => '─'.repeat(w)).join('  '),
    ...rows.map(line),
  ].join('\n');
}
