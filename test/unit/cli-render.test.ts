import { describe, expect, it } from 'vitest';
import {
  isConnectFailure,
  oneLine,
  parseConnectionUrl,
  safeUrl,
  UsageError,
} from '../../src/cli/connection.js';
import { ProgressBar } from '../../src/cli/progress-bar.js';
import { renderLockReport } from '../../src/cli/render-lock-report.js';
import { renderRatioChart } from '../../src/cli/render-ratio-chart.js';
import { renderTable } from '../../src/cli/render-table.js';
import { createStyle } from '../../src/cli/style.js';
import { buildBlockingForest } from '../../src/diagnostics/blocking-forest.js';
import type { LockReport, SessionInfo } from '../../src/diagnostics/index.js';

function sink(isTTY: boolean) {
  const chunks: string[] = [];
  return { stream: { write: (s: string) => chunks.push(s), isTTY }, chunks };
}

describe('renderTable', () => {
  it('pads columns, right-aligns numbers, draws a header rule', () => {
    const text = renderTable(
      [{ header: 'scenario' }, { header: 'n', align: 'right' }],
      [
        ['a', '1'],
        ['longer', '100'],
      ],
    );
    expect(text.split('\n')).toEqual(['scenario    n', '────────  ───', 'a           1', 'longer    100']);
  });
});

describe('ProgressBar', () => {
  it('prints plain lines (at most one per quarter) when not on a TTY', () => {
    const { stream, chunks } = sink(false);
    const bar = new ProgressBar(stream, 'job');
    for (let i = 0; i <= 10; i++) bar.update(i, 10);
    bar.done('ok');
    expect(chunks).toEqual([
      'job: 0%\n',
      'job: 30%\n',
      'job: 50%\n',
      'job: 80%\n',
      'job: 100%\n',
      'job: ok\n',
    ]);
  });
  it('redraws one line on a TTY', () => {
    const { stream, chunks } = sink(true);
    const bar = new ProgressBar(stream, 'job', 10);
    bar.update(5, 10);
    bar.done('ok');
    expect(chunks[0]).toBe('\r\x1b[2K█████░░░░░  50% job');
    expect(chunks.at(-1)).toBe('\r\x1b[2Kjob: ok\n');
  });
});

describe('createStyle', () => {
  it('colors only on a TTY, and never with NO_COLOR', () => {
    expect(createStyle({ write: () => true, isTTY: false }, {})('red', 'x')).toBe('x');
    expect(createStyle({ write: () => true, isTTY: true }, { NO_COLOR: '1' })('red', 'x')).toBe('x');
    expect(createStyle({ write: () => true, isTTY: true }, { NO_COLOR: '' })('red', 'x')).toBe('x');
    const tty = createStyle({ write: () => true, isTTY: true }, {});
    expect(tty.enabled).toBe(true);
    expect(tty('red', 'x')).toContain('\x1b[31m');
  });
});

describe('renderRatioChart', () => {
  it('draws one bar per row, the 1× line, and escapes names', () => {
    const svg = renderRatioChart([
      {
        name: 'tx <overhead>',
        baseline: 'raw',
        rows: [
          { name: 'raw', opsPerSec: 1000, ratio: 1 },
          { name: 'TxManager', opsPerSec: 900, ratio: 0.9 },
        ],
      },
    ]);
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.match(/<rect x=/g)).toHaveLength(2);
    expect(svg).toContain('tx &lt;overhead&gt;');
    expect(svg).toContain('0.90×');
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
  });
});

describe('connection helpers', () => {
  it('accepts postgres URLs and refuses others with a UsageError', () => {
    expect(parseConnectionUrl('postgresql://u:p@h:5432/d')).toBe('postgresql://u:p@h:5432/d');
    expect(() => parseConnectionUrl('http://h/d')).toThrow(UsageError);
    expect(() => parseConnectionUrl('nope')).toThrow(/not a URL/);
  });
  it('hides the password and keeps errors on one line', () => {
    expect(safeUrl('postgres://u:secret@h/d')).toBe('postgres://u:***@h/d');
    expect(oneLine(Object.assign(new Error('a\n  b'), { code: 'ECONNREFUSED' }))).toBe('a b (ECONNREFUSED)');
    expect(isConnectFailure(Object.assign(new Error('x'), { code: '28P01' }))).toBe(true);
    expect(isConnectFailure(new TypeError('bug'))).toBe(false);
  });
});

describe('renderLockReport', () => {
  const session = (pid: number, blockedBy: number[], mode: string | null): SessionInfo => ({
    pid,
    database: 'shop',
    user: 'app',
    applicationName: `api-${pid}`,
    clientAddr: null,
    backendType: 'client backend',
    state: mode ? 'active' : 'idle in transaction',
    waitEventType: mode ? 'Lock' : 'Client',
    waitEvent: mode ? 'relation' : 'ClientRead',
    query: mode === 'AccessExclusiveLock' ? 'ALTER TABLE orders ADD COLUMN x text' : 'SELECT * FROM orders',
    xactAgeMs: 65_000,
    queryAgeMs: 64_000,
    stateAgeMs: 64_000,
    waitAgeMs: mode ? 3_000 : null,
    waitingFor: mode
      ? { locktype: 'relation', mode, relation: 'orders', transactionId: null, advisoryKey: null }
      : null,
    blockedBy,
    locksHeld: 1,
    hidden: false,
  });

  it('summarises a 400-session queue instead of printing 400 lines', () => {
    const sessions = [
      session(1, [], null),
      session(2, [1], 'AccessExclusiveLock'),
      ...Array.from({ length: 400 }, (_, i) => session(100 + i, [2], 'AccessShareLock')),
    ];
    const { roots } = buildBlockingForest(sessions);
    const report: LockReport = {
      takenAt: new Date('2026-01-01T00:00:00Z'),
      database: 'shop',
      role: 'doctor',
      serverVersion: '18.4',
      visibility: { limited: false, reason: null, hiddenSessions: 0 },
      sessions,
      forest: roots,
      cascades: [
        {
          rootCause: sessions[1] as SessionInfo,
          mode: 'AccessExclusiveLock',
          relation: 'orders',
          waitsFor: [1],
          queued: sessions.slice(2).map((s) => s.pid),
        },
      ],
      waitCycles: [],
      idleInTransaction: [sessions[0] as SessionInfo],
      longWaits: sessions.slice(1),
      advisoryLocks: [],
      suggestions: [{ pid: 2, action: 'cancel', sql: 'SELECT pg_cancel_backend(2);', reason: 'cascade' }],
      healthy: false,
    };
    const text = renderLockReport(report);
    expect(text).toContain(
      '✖ pid 2 waits for AccessExclusiveLock on orders (held by pid 1) — 400 session(s) queued behind it',
    );
    expect(text).toContain(
      'pid 1 [idle in transaction, tx 1.1min] root blocker, 401 blocked user=app app=api-1',
    );
    expect(text).toContain('└─ … 395 more session(s) waiting for AccessShareLock: pids 105, 106,');
    expect(text).toContain('… and 391 more (--json lists them all)');
    expect(text).toContain('1. cancel pid 2: cascade');
    expect(text.split('\n').length).toBeLessThan(80);
  });
});
