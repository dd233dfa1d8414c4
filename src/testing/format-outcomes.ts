import type { StepOutcome } from './schedule-outcome.js';

/** Options of {@link formatOutcomes}. */
export interface FormatOutcomesOptions {
  /** Longest SQL text shown per step (whitespace collapsed, cut with `…`). Default 60. */
  readonly sqlWidth?: number;
  /** Show the returned rows of `ok` steps (`ok [id=1 v=2]`). Default true. */
  readonly rows?: boolean;
}

function renderValue(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function renderResult(outcome: StepOutcome, showRows: boolean): string {
  if (outcome.status === 'error') return `error ${outcome.code ?? outcome.message ?? 'unknown'}`;
  if (showRows && outcome.rows.length > 0) {
    const rows = outcome.rows.map((row) =>
      Object.entries(row)
        .map(([k, v]) => `${k}=${renderValue(v)}`)
        .join(' '),
    );
    return `ok [${rows.join('; ')}]`;
  }
  if (outcome.rowCount !== null && outcome.rowCount > 0) {
    return `ok ${outcome.rowCount} row${outcome.rowCount === 1 ? '' : 's'}`;
  }
  return 'ok';
}

/**
 * Renders {@link Schedule} outcomes as one line per step, for readable assertions and failure output:
 * `index session: sql -> result`, where result is `ok`, `ok 1 row` (a write), `ok [v=2]` (rows
 * returned), `error 40001`, and a step that waited on a lock reads `blocked, ok 1 row after 3` (it
 * finished after step 3); a step held back by `whenSessionBlocked: 'defer'` starts with
 * `sent after 5, `.
 *
 * @example
 * expect(formatOutcomes(outcomes)).toBe(
 *   [
 *     '0 t1: begin -> ok',
 *     '1 t2: begin -> ok',
 *     '2 t1: update acct set n = n + 1 where id = 1 -> ok 1 row',
 *     '3 t2: update acct set n = n + 1 where id = 1 -> blocked, ok 1 row after 4',
 *     '4 t1: commit -> ok',
 *   ].join('\n'),
 * );
 */
export function formatOutcomes(
  outcomes: readonly StepOutcome[],
  options: FormatOutcomesOptions = {},
): string {
  const width = options.sqlWidth ?? 60;
  const showRows = options.rows ?? true;
  return outcomes
    .map((outcome, index) => {
      const flat = outcome.sql.replace(/\s+/g, ' ').trim();
      const sql = flat.length > width ? `${flat.slice(0, Math.max(1, width - 1))}…` : flat;
      const result = renderResult(outcome, showRows);
      const text = outcome.blocked
        ? `blocked, ${result}${outcome.completedAfter === undefined ? '' : ` after ${outcome.completedAfter}`}`
        : result;
      const sent = outcome.sentAfter === undefined ? '' : `sent after ${outcome.sentAfter}, `;
      return `${index} ${outcome.session}: ${sql} -> ${sent}${text}`;
    })
    .join('\n');
}
