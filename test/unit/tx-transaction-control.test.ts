import { describe, expect, it } from 'vitest';
import { controlStatements } from '../../src/tx/transaction-control.js';

const types = (sql: string) => controlStatements(sql).map((s) => s.type);

describe('controlStatements', () => {
  it.each([
    ['COMMIT', ['control']],
    ['  begin isolation level serializable', ['control']],
    ['start transaction', ['control']],
    ['START something_else', []],
    ['END', ['control']],
    ['abort', ['control']],
    ["PREPARE TRANSACTION 'gid'", ['control']],
    ['PREPARE q AS SELECT 1', []],
    ["COMMIT PREPARED 'gid'", ['control']],
    ["ROLLBACK PREPARED 'gid'", ['control']],
    ['ROLLBACK AND CHAIN', ['control']],
    ['ROLLBACK TO SAVEPOINT a', ['rollback-to']],
    ['rollback work to a', ['rollback-to']],
    ['SELECT 1; COMMIT; SELECT 2', ['control']],
    ["SELECT 'COMMIT'", []],
    ["SELECT e'\\'; COMMIT'", []],
    ["SELECT 'it''s; COMMIT'", []],
    ["SELECT U&'d\\0061t; COMMIT'", []],
    ['SELECT $q$ ; COMMIT $q$', []],
    ['SELECT $1; ', []],
    ['/* /* nested; */ COMMIT; */ SELECT 1', []],
    ['-- COMMIT;\nSELECT 1', []],
    ['SELECT "a;b" FROM t; END', ['control']],
    ['SELECT 1 AS "end"', []],
    ['"commit"', []],
    ['DO $$ BEGIN COMMIT; END $$', []],
  ])('%j → %j', (sql, expected) => {
    expect(types(sql)).toEqual(expected);
  });

  it('reads savepoint names as PostgreSQL resolves them', () => {
    expect(controlStatements('SAVEPOINT Mine; RELEASE SAVEPOINT "Mine"; ROLLBACK TO "x""y"')).toEqual([
      { type: 'savepoint', statement: 'SAVEPOINT Mine', name: 'mine' },
      { type: 'release', statement: 'RELEASE SAVEPOINT "Mine"', name: 'Mine' },
      { type: 'rollback-to', statement: 'ROLLBACK TO "x""y"', name: 'x"y' },
    ]);
  });

  it('an unterminated string or comment hides the rest (the server refuses the statement anyway)', () => {
    expect(types("SELECT 'open; COMMIT")).toEqual([]);
    expect(types('/* open; COMMIT')).toEqual([]);
  });
});
