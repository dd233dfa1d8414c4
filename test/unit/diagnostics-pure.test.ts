import { describe, expect, it } from 'vitest';
import { buildBlockingForest, queuedBehind } from '../../src/diagnostics/blocking-forest.js';
import { inspectDdl } from '../../src/diagnostics/ddl-statement.js';
import { advisoryKeyParts } from '../../src/diagnostics/lock-report.js';
import { redactQuery, truncateQuery } from '../../src/diagnostics/redact-query.js';
import type { SessionInfo } from '../../src/diagnostics/session.js';

describe('redactQuery', () => {
  it.each([
    ["UPDATE users SET email = 'a@b.c' WHERE id = 42", 'UPDATE users SET email = $? WHERE id = $?'],
    ["SELECT E'it\\'s', 'o''k', $$dollar$$, $tag$ x $tag$", 'SELECT $?, $?, $?, $?'],
    ['SELECT * FROM t2 WHERE a = $1 AND b > 3.5e10', 'SELECT * FROM t2 WHERE a = $1 AND b > $?'],
    [
      'SELECT "col 1", x1 FROM "t""q" -- secret 123\nWHERE y = 0x1F',
      'SELECT "col 1", x1 FROM "t""q"\nWHERE y = $?',
    ],
    [
      "SELECT /* card 4111 */ 1 /* a /* nested */ b */ FROM t WHERE n = N'x'",
      'SELECT   $?   FROM t WHERE n = $?',
    ],
  ])('%s', (sql, expected) => {
    expect(redactQuery(sql)).toBe(expected);
  });
});

describe('truncateQuery', () => {
  it('collapses whitespace and marks the cut', () => {
    expect(truncateQuery('SELECT   *\n  FROM t', 10)).toBe('SELECT * …');
    expect(truncateQuery('SELECT 1', 10)).toBe('SELECT 1');
  });
});

describe('inspectDdl', () => {
  it('recognises statements that refuse a transaction block', () => {
    expect(inspectDdl('create unique index concurrently if not exists "Ix" on app.orders (a)')).toEqual({
      statements: 1,
      nonTransactional: 'CREATE INDEX CONCURRENTLY',
      transactionControl: null,
      concurrentIndexName: '"Ix"',
      concurrentIndexSchema: 'app',
    });
    expect(inspectDdl('CREATE INDEX CONCURRENTLY ON t (a)').concurrentIndexName).toBeNull();
    expect(inspectDdl('REINDEX (VERBOSE) TABLE CONCURRENTLY t').nonTransactional).toBe(
      'REINDEX CONCURRENTLY',
    );
    expect(inspectDdl('vacuum analyze t').nonTransactional).toBe('VACUUM');
    expect(inspectDdl("ALTER SYSTEM SET work_mem = '8MB'").nonTransactional).toBe('ALTER SYSTEM');
    expect(inspectDdl('ALTER TABLE p DETACH PARTITION c CONCURRENTLY').nonTransactional).toContain('DETACH');
  });
  it('ignores keywords and semicolons inside literals and comments', () => {
    expect(inspectDdl("ALTER TABLE t ADD COLUMN c text DEFAULT 'x; VACUUM'")).toMatchObject({
      statements: 1,
      nonTransactional: null,
      transactionControl: null,
    });
    expect(inspectDdl('-- VACUUM\nALTER TABLE t ADD COLUMN c int;').statements).toBe(1);
    expect(inspectDdl('BEGIN; ALTER TABLE t ADD c int; COMMIT;').transactionControl).toBe('BEGIN');
  });
});

describe('advisoryKeyParts', () => {
  it('reassembles a signed 64-bit key from classid (high) and objid (low)', () => {
    const key = -1234567890123456789n;
    const u = BigInt.asUintN(64, key);
    const hi = Number(u >> 32n);
    const lo = Number(u & 0xffffffffn);
    expect(advisoryKeyParts(hi, lo, 1)).toEqual({ key64: key, key32: null });
    expect(advisoryKeyParts(String(hi), String(lo), 1).key64).toBe(key);
    expect(advisoryKeyParts(7, 4294967293, 2)).toEqual({ key64: null, key32: [7, -3] });
  });
});

function session(pid: number, blockedBy: number[] = [], extra: Partial<SessionInfo> = {}): SessionInfo {
  return {
    pid,
    database: 'db',
    user: 'u',
    applicationName: null,
    clientAddr: null,
    backendType: 'client backend',
    state: blockedBy.length ? 'active' : 'idle in transaction',
    waitEventType: blockedBy.length ? 'Lock' : null,
    waitEvent: null,
    query: null,
    xactAgeMs: 1000,
    queryAgeMs: 1000,
    stateAgeMs: 1000,
    waitAgeMs: blockedBy.length ? 500 : null,
    waitingFor: null,
    blockedBy,
    locksHeld: 1,
    hidden: false,
    ...extra,
  };
}

describe('buildBlockingForest', () => {
  it('puts a reader under the waiting ALTER rather than under the holder', () => {
    const sessions = [session(1), session(2, [1]), session(3, [1, 2]), session(4, [2]), session(5)];
    const { roots, cycles } = buildBlockingForest(sessions);
    expect(cycles).toEqual([]);
    expect(roots.map((r) => r.session.pid)).toEqual([1]);
    expect(roots[0]?.blockedCount).toBe(3);
    expect(roots[0]?.children.map((c) => c.session.pid)).toEqual([2]);
    expect(roots[0]?.children[0]?.children.map((c) => c.session.pid).sort()).toEqual([3, 4]);
    expect(queuedBehind(sessions, 2)).toEqual([3, 4]);
    expect(queuedBehind(sessions, 1)).toEqual([2, 3, 4]);
  });
  it('reports a wait cycle (a deadlock before the detector runs) and still shows it', () => {
    const { roots, cycles } = buildBlockingForest([session(7, [8]), session(8, [7]), session(9, [8])]);
    expect(cycles).toEqual([[7, 8]]);
    expect(roots.map((r) => r.session.pid)).toEqual([7]);
    expect(roots[0]?.blockedCount).toBe(2);
  });
  it('sorts roots by how many sessions they block', () => {
    const { roots } = buildBlockingForest([
      session(1),
      session(2, [1]),
      session(3),
      session(4, [3]),
      session(5, [3]),
    ]);
    expect(roots.map((r) => r.session.pid)).toEqual([3, 1]);
  });
});
