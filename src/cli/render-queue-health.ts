import type { HorizonHolder } from '../diagnostics/horizon.js';
import type { QueueHealth } from './queue-health-report.js';
import { renderTable } from './render-table.js';
import type { Style } from './style.js';

function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = n;
  let unit = 'B';
  for (const u of units) {
    if (v < 1024) break;
    v /= 1024;
    unit = u;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${unit}`;
}

function age(ms: number): string {
  if (ms === 0) return '-';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 3_600_000)} h`;
}

/**
 * Renders the queues' health as a table (one row per queue schema: depth by state, oldest ready age,
 * table statistics) followed by each queue's findings, then what holds the MVCC horizon back (`holders`,
 * see horizonHolders). Counts followed by `+` reached the cap.
 *
 * @example
 * console.log(renderQueueHealth(await queueHealth(pool, schemas, { lagMs: 300_000, cap: 10_000 }), style, []));
 */
export function renderQueueHealth(
  queues: readonly QueueHealth[],
  style: Style,
  holders: readonly HorizonHolder[] = [],
): string {
  const out = [style('bold', 'Queues')];
  if (queues.length === 0) {
    out.push('  no pg-txkit queue in this database (or pass --queue-schema)');
    return out.join('\n');
  }
  const n = (c: { count: number; exact: boolean }) => `${c.count}${c.exact ? '' : '+'}`;
  const table = renderTable(
    [
      { header: 'schema' },
      { header: 'version', align: 'right' },
      { header: 'pending', align: 'right' },
      { header: 'ready', align: 'right' },
      { header: 'running', align: 'right' },
      { header: 'expired', align: 'right' },
      { header: 'dead', align: 'right' },
      { header: 'oldest ready', align: 'right' },
      { header: 'live tup', align: 'right' },
      { header: 'dead tup', align: 'right' },
      { header: 'size', align: 'right' },
    ],
    queues.map((q) =>
      'error' in q
        ? [q.schema, '?', '?', '?', '?', '?', '?', '?', '?', '?', '?']
        : [
            q.schema,
            String(q.version),
            n(q.pending),
            n(q.ready),
            n(q.running),
            n(q.expired),
            n(q.dead),
            age(q.oldestReadyMs),
            String(q.table.liveTuples),
            String(q.table.deadTuples),
            bytes(q.table.totalBytes),
          ],
    ),
  );
  out.push(...table.split('\n').map((line) => `  ${line}`));
  for (const q of queues) {
    for (const f of q.findings) {
      const mark = f.severity === 'problem' ? style('red', '✖') : style('yellow', '!');
      out.push(`  ${mark} ${q.schema}: ${f.message}`);
    }
  }
  if (queues.every((q) => q.findings.length === 0))
    out.push(
      style(
        'green',
        '  OK: no expired lease, no dead job, no lag, no bloat, nothing holds the horizon back.',
      ),
    );
  out.push(
    '  (counts are exact below the cap, shown with + at it; tuples and size are statistics estimates)',
  );
  for (const h of holders) {
    const held = h.ageMs === null ? '' : ` for ${age(h.ageMs)}`;
    const query = h.query === null || h.kind !== 'session' ? '' : `: ${h.query}`;
    out.push(
      `  MVCC horizon held${held} by ${h.kind} ${h.id} (${h.detail}; xmin ${h.xmin}, ${h.xidAge} transactions old)${query}`,
    );
  }
  return out.join('\n');
}
