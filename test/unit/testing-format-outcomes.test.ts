import { describe, expect, it } from 'vitest';
import { formatOutcomes } from '../../src/testing/format-outcomes.js';
import type { StepOutcome } from '../../src/testing/schedule.js';

const ok = (session: string, sql: string, extra: Partial<StepOutcome> = {}): StepOutcome => ({
  session,
  sql,
  blocked: false,
  status: 'ok',
  rows: [],
  rowCount: null,
  results: [],
  notices: [],
  notifications: [],
  completionOrder: 0,
  ...extra,
});

describe('formatOutcomes()', () => {
  it('renders one line per step with rows, row counts, errors and blocking', () => {
    const text = formatOutcomes([
      ok('t1', 'begin'),
      ok('t1', 'select id, note\n  from t', {
        rows: [
          { id: 1, note: null },
          { id: 2, note: 'x' },
        ],
        rowCount: 2,
      }),
      ok('t2', 'update t set v = 1', { blocked: true, rowCount: 3, completedAfter: 3 }),
      ok('t1', 'commit'),
      {
        session: 't2',
        sql: 'update t set v = 2',
        blocked: true,
        status: 'error',
        rows: [],
        rowCount: null,
        results: [],
        notices: [],
        notifications: [],
        completionOrder: 0,
        code: '40001',
        message: 'could not serialize access due to concurrent update',
        completedAfter: 5,
      },
      ok('t1', 'delete from t where false', { rowCount: 0 }),
      ok('t1', 'select $1::jsonb as j, $2::date as d', {
        rows: [{ j: { a: 1 }, d: new Date('2026-01-02T00:00:00Z') }],
        rowCount: 1,
      }),
    ]);
    expect(text).toBe(
      [
        '0 t1: begin -> ok',
        '1 t1: select id, note from t -> ok [id=1 note=null; id=2 note=x]',
        '2 t2: update t set v = 1 -> blocked, ok 3 rows after 3',
        '3 t1: commit -> ok',
        '4 t2: update t set v = 2 -> blocked, error 40001 after 5',
        '5 t1: delete from t where false -> ok',
        '6 t1: select $1::jsonb as j, $2::date as d -> ok [j={"a":1} d=2026-01-02T00:00:00.000Z]',
      ].join('\n'),
    );
  });

  it('says when a deferred step was really sent', () => {
    expect(formatOutcomes([ok('t2', 'commit', { sentAfter: 4 })])).toBe('0 t2: commit -> sent after 4, ok');
  });

  it('cuts long SQL and can hide rows', () => {
    const text = formatOutcomes([ok('t1', `select ${'x'.repeat(100)}`, { rows: [{ a: 1 }], rowCount: 1 })], {
      sqlWidth: 10,
      rows: false,
    });
    expect(text).toBe('0 t1: select xx… -> ok 1 row');
  });

  it('shows a connection error without SQLSTATE by its message', () => {
    const text = formatOutcomes([
      {
        session: 't1',
        sql: 'select 1',
        blocked: false,
        status: 'error',
        rows: [],
        rowCount: null,
        results: [],
        notices: [],
        notifications: [],
        completionOrder: 0,
        message: 'boom',
      },
    ]);
    expect(text).toBe('0 t1: select 1 -> error boom');
  });
});
