import { describe, expect, it } from 'vitest';
import { beginSql, beginStatements } from '../../src/tx/begin-sql.js';
import { firstFlightClass, fitsFirstFlight } from '../../src/tx/first-flight.js';

describe('fitsFirstFlight', () => {
  it('takes one statement, with or without values, as text or a config', () => {
    expect(fitsFirstFlight('UPDATE t SET n = n + 1 WHERE id = $1', [1])).toBe(true);
    expect(fitsFirstFlight('SELECT 1', undefined)).toBe(true);
    expect(fitsFirstFlight('SELECT 1;  ', undefined)).toBe(true);
    expect(fitsFirstFlight({ text: 'SELECT $1::int', values: [1] }, undefined)).toBe(true);
    expect(fitsFirstFlight({ text: 'SELECT 1', rowMode: 'array' } as never, undefined)).toBe(true);
  });

  it('sends on their own: several statements without values, prepared statements, paged reads, Submittables, callbacks', () => {
    expect(fitsFirstFlight('SELECT 1; SELECT 2', undefined)).toBe(false);
    expect(fitsFirstFlight("SELECT ';'", undefined)).toBe(false); // conservative: any `;` before the end
    expect(fitsFirstFlight({ text: 'SELECT 1', name: 'one' }, undefined)).toBe(false);
    expect(fitsFirstFlight({ text: 'SELECT 1', rows: 10 } as never, undefined)).toBe(false);
    expect(fitsFirstFlight({ text: 'SELECT 1', submit: () => null } as never, undefined)).toBe(false);
    expect(fitsFirstFlight({ text: 'SELECT 1', callback: () => {} } as never, undefined)).toBe(false);
    expect(fitsFirstFlight({} as never, undefined)).toBe(false);
  });
});

describe('beginStatements', () => {
  it('are the statements of beginSql, one by one', () => {
    const settings = {
      isolation: 'serializable' as const,
      readOnly: true,
      deferrable: true,
      lockTimeout: 500,
      statementTimeout: 2000,
      idleInTransactionTimeout: undefined,
    };
    expect(beginStatements(settings)).toEqual([
      'BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE',
      'SET LOCAL lock_timeout = 500',
      'SET LOCAL statement_timeout = 2000',
    ]);
    expect(beginSql(settings)).toBe(beginStatements(settings).join('; '));
  });
});

describe('firstFlightClass', () => {
  it('is undefined for a client that is not pg JavaScript client (no Query class, no connection)', () => {
    expect(firstFlightClass({} as never)).toBeUndefined();
    class NativeLike {}
    expect(firstFlightClass(new NativeLike() as never)).toBeUndefined();
  });
});
