/** One benchmark's result, as `bench/*.ts` modules return it. */
export interface BenchResult {
  /** Benchmark name, e.g. 'tx-overhead'. */
  readonly name: string;
  /** Name of the row the ratios are relative to (its ratio is 1). */
  readonly baseline: string;
  readonly rows: readonly { readonly name: string; readonly opsPerSec: number; readonly ratio: number }[];
  readonly notes?: string;
}

const esc = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/**
 * A hand-written SVG bar chart of the ratios (one group per benchmark, one bar per row, a dashed line
 * at 1× = the baseline). No dependencies.
 *
 * @example
 * await writeFile('bench-results.svg', renderRatioChart(results));
 */
export function renderRatioChart(results: readonly BenchResult[]): string {
  const barH = 18;
  const gap = 6;
  const groupGap = 26;
  const labelW = 260;
  const plotW = 420;
  const rightW = 150;
  const top = 40;
  const maxRatio = Math.max(
    1,
    ...results.flatMap((r) => r.rows.map((row) => (Number.isFinite(row.ratio) ? row.ratio : 0))),
  );
  const scale = (ratio: number) => (Math.max(0, ratio) / maxRatio) * plotW;
  const parts: string[] = [];
  let y = top;
  for (const result of results) {
    parts.push(
      `<text x="8" y="${y + 12}" font-weight="bold">${esc(result.name)} <tspan font-weight="normal" fill="#555">(ratio to ${esc(result.baseline)})</tspan></text>`,
    );
    y += 20;
    for (const row of result.rows) {
      const w = scale(row.ratio);
      const fill = row.name === result.baseline ? '#9aa5b1' : row.ratio >= 1 ? '#2f855a' : '#c05621';
      parts.push(
        `<text x="${labelW - 8}" y="${y + barH - 5}" text-anchor="end">${esc(row.name)}</text>`,
        `<rect x="${labelW}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${fill}"><title>${esc(`${row.name}: ${row.ratio.toFixed(2)}× (${row.opsPerSec.toFixed(0)} ops/s)`)}</title></rect>`,
        `<text x="${(labelW + w + 6).toFixed(1)}" y="${y + barH - 5}">${row.ratio.toFixed(2)}× · ${row.opsPerSec.toFixed(0)} ops/s</text>`,
      );
      y += barH + gap;
    }
    y += groupGap;
  }
  const height = y + 10;
  const oneX = labelW + scale(1);
  const width = labelW + plotW + rightW;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="8" y="22" font-size="15" font-weight="bold">pg-txkit benchmarks: throughput ratio to baseline</text>`,
    `<line x1="${oneX.toFixed(1)}" y1="${top - 4}" x2="${oneX.toFixed(1)}" y2="${height - 10}" stroke="#333" stroke-dasharray="4 3"/>`,
    `<text x="${(oneX + 3).toFixed(1)}" y="${top - 6}" fill="#333">1×</text>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}
