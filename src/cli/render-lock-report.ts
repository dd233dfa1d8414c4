import type { BlockingNode } from '../diagnostics/blocking-forest.js';
import type { LockReport } from '../diagnostics/lock-report.js';
import type { SessionInfo } from '../diagnostics/session.js';
import type { Style } from './style.js';

const plain = Object.assign((_f: unknown, text: string) => text, { enabled: false }) as Style;

/**
 * Renders a lock report as indented text: cascades (root causes) first, then the blocking tree with
 * root blockers first, idle transactions, long waits, advisory locks, and suggested actions with SQL.
 *
 * @example
 * const r = await lockReport(pool);
 * if (r.isOk()) console.log(renderLockReport(r.value));
 */
export function renderLockReport(
  report: LockReport,
  style: Style = plain,
  limits: { readonly maxChildren?: number; readonly maxList?: number } = {},
): string {
  const maxChildren = Math.max(2, limits.maxChildren ?? 6);
  const maxList = Math.max(1, limits.maxList ?? 10);
  const out: string[] = [];
  const capped = <T>(items: readonly T[], line: (item: T) => void) => {
    items.slice(0, maxList).forEach(line);
    if (items.length > maxList) out.push(`  … and ${items.length - maxList} more (--json lists them all)`);
  };
  const head = (t: string) => out.push('', style('bold', t));
  out.push(
    `${style('bold', 'pg-txkit doctor')} — database ${report.database} as ${report.role}, PostgreSQL ${report.serverVersion}, ${report.takenAt.toISOString()}`,
  );
  if (report.visibility.limited)
    out.push(style('yellow', `visibility: LIMITED — ${report.visibility.reason}`));
  else out.push('visibility: full (pg_read_all_stats)');

  if (report.cascades.length > 0) {
    head('Lock-queue cascades (root cause)');
    for (const c of report.cascades) {
      out.push(
        `  ${style('red', '✖')} pid ${c.rootCause.pid} waits for ${style('red', c.mode)} on ${c.relation ?? '?'} ` +
          `(held by pid ${c.waitsFor.join(', ') || '?'}) — ${style('red', `${c.queued.length} session(s) queued behind it`)}`,
        `      ${quote(c.rootCause)}`,
      );
    }
  }

  head('Blocking tree (root blockers first)');
  if (report.forest.length === 0) out.push('  no session waits for a lock');
  for (const root of report.forest) renderNode(root, '  ', '', true, out, style, maxChildren);
  if (report.waitCycles.length > 0) {
    out.push(
      style(
        'red',
        `  wait cycles (deadlocks not yet broken): ${report.waitCycles.map((c) => c.join(' ↔ ')).join('; ')}`,
      ),
    );
  }

  if (report.idleInTransaction.length > 0) {
    head('Idle in transaction');
    capped(report.idleInTransaction, (s) => {
      out.push(
        `  pid ${s.pid} ${who(s)} idle ${secs(s.stateAgeMs)}, transaction open ${secs(s.xactAgeMs)}, ${s.locksHeld} lock(s) held`,
        `      ${quote(s)}`,
      );
    });
  }
  if (report.longWaits.length > 0) {
    head('Long lock waits');
    capped(report.longWaits, (s) => out.push(`  pid ${s.pid} ${waitText(s)} ${who(s)}`));
  }
  if (report.advisoryLocks.length > 0) {
    head('Advisory locks');
    capped(report.advisoryLocks, (a) => {
      const scope =
        a.sessionLevel === true ? 'session-level' : a.sessionLevel === false ? 'in a transaction' : '';
      out.push(
        `  pid ${a.pid} ${a.granted ? 'holds' : 'waits for'} key ${a.key} (${a.mode}) ${scope} ${a.state ?? ''} ${secs(a.stateAgeMs)}` +
          (a.suspectedLeak ? ` ${style('red', 'probably leaked')}` : ''),
      );
    });
  }
  if (report.suggestions.length > 0) {
    head('Suggested actions');
    report.suggestions.forEach((s, i) => {
      out.push(
        `  ${i + 1}. ${style('bold', `${s.action} pid ${s.pid}`)}: ${s.reason}`,
        `       ${style('cyan', s.sql)}`,
      );
    });
  }
  out.push('', summary(report, style));
  return out.join('\n');
}

function renderNode(
  node: BlockingNode,
  prefix: string,
  branch: string,
  isRoot: boolean,
  out: string[],
  style: Style,
  maxChildren: number,
): void {
  const s = node.session;
  const status = isRoot
    ? style('red', `root blocker, ${node.blockedCount} blocked`)
    : `${waitText(s)}${s.blockedBy.length > 1 ? ` (also behind ${s.blockedBy.join(', ')})` : ''}`;
  const state = isRoot
    ? ` [${s.state ?? '?'}${s.xactAgeMs !== null ? `, tx ${secs(s.xactAgeMs)}` : ''}]`
    : '';
  out.push(`${prefix}${branch}pid ${s.pid}${state} ${status} ${who(s)}`);
  const childPrefix = prefix + (isRoot ? '' : branch === '└─ ' ? '   ' : '│  ');
  out.push(`${childPrefix}${node.children.length > 0 ? '│' : ' '}   ${quote(s)}`);
  // A long queue (the Friday incident had 400) is summarised: the first children, then one line.
  const shown = node.children.length > maxChildren ? node.children.slice(0, maxChildren - 1) : node.children;
  const hidden = node.children.slice(shown.length);
  shown.forEach((child, i) => {
    const last = i === shown.length - 1 && hidden.length === 0;
    renderNode(child, childPrefix, last ? '└─ ' : '├─ ', false, out, style, maxChildren);
  });
  if (hidden.length > 0) {
    const below = hidden.reduce((n, c) => n + c.blockedCount, 0);
    const modes = [...new Set(hidden.map((c) => c.session.waitingFor?.mode ?? 'a lock'))].join(', ');
    out.push(
      `${childPrefix}└─ … ${hidden.length} more session(s) waiting for ${modes}` +
        `${below > 0 ? ` (+${below} behind them)` : ''}: pids ${pidList(hidden.map((c) => c.session.pid))}`,
    );
  }
}

function pidList(pids: readonly number[]): string {
  return pids.length > 12 ? `${pids.slice(0, 12).join(', ')}, …` : pids.join(', ');
}

function waitText(s: SessionInfo): string {
  const w = s.waitingFor;
  if (!w) return 'waiting';
  const target =
    w.locktype === 'transactionid'
      ? `transaction ${w.transactionId ?? '?'} (row lock)`
      : w.locktype === 'advisory'
        ? `advisory key ${w.advisoryKey ?? '?'}`
        : `${w.locktype}${w.relation ? ` ${w.relation}` : ''}`;
  return `waits ${secs(s.waitAgeMs)} for ${w.mode} on ${target}`;
}

function who(s: SessionInfo): string {
  const parts = [s.user ? `user=${s.user}` : '', s.applicationName ? `app=${s.applicationName}` : ''];
  if (s.clientAddr) parts.push(`from ${s.clientAddr}`);
  return parts.filter(Boolean).join(' ');
}

function quote(s: SessionInfo): string {
  return s.query === null ? '(no query)' : `> ${s.query}`;
}

function secs(ms: number | null): string {
  if (ms === null) return '?';
  return ms >= 60_000 ? `${(ms / 60_000).toFixed(1)}min` : `${(ms / 1000).toFixed(1)}s`;
}

function summary(report: LockReport, style: Style): string {
  if (report.healthy)
    return style('green', 'OK: no blocking, no cascade, no long idle transaction, no long wait.');
  const blocked = report.forest.reduce((n, r) => n + r.blockedCount, 0);
  return style(
    'yellow',
    `Findings: ${report.cascades.length} cascade(s), ${report.forest.length} root blocker(s) with ${blocked} blocked session(s), ` +
      `${report.idleInTransaction.length} idle in transaction, ${report.longWaits.length} long wait(s), ` +
      `${report.advisoryLocks.filter((a) => a.suspectedLeak).length} suspected advisory leak(s).`,
  );
}
