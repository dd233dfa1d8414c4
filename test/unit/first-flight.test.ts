import pg from 'pg';
import oldestPg from 'pg-oldest';
import { describe, expect, it } from 'vitest';
import { beginSql, beginStatements } from '../../src/tx/begin-sql.js';
import {
  type FirstFlightClass,
  type FirstFlightQuery,
  firstFlightClass,
  fitsFirstFlight,
} from '../../src/tx/first-flight.js';

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

/** What pg's client calls on its active query as the server's messages arrive. */
interface PgQueryMessages {
  prepare(connection: unknown): void;
  handleRowDescription(message: unknown): void;
  handleDataRow(message: unknown): void;
  handleCommandComplete(message: unknown, connection: unknown): void;
  handleError(error: unknown, connection: unknown): void;
  handleReadyForQuery(connection: unknown): void;
}

/** A pg connection stand-in that records what a flight writes to it, in order. */
function recordingConnection() {
  const written: [string, unknown][] = [];
  const record = (method: string) => (argument: unknown) => {
    written.push([method, argument]);
  };
  return {
    written,
    connection: {
      parse: record('parse'),
      bind: (config: { values?: unknown[]; valueMapper?: (v: unknown) => unknown }) => {
        // What pg's serializer does with the values: map each with pg's own mapper.
        const values = (config.values ?? []).map((v) => (config.valueMapper ? config.valueMapper(v) : v));
        written.push(['bind', values]);
      },
      describe: record('describe'),
      execute: record('execute'),
      close: record('close'),
      flush: record('flush'),
      sync: () => written.push(['sync', undefined]),
      parsedStatements: {},
      submittedNamedStatements: {},
    },
  };
}

describe.each([
  ['pg (current)', pg],
  ['pg 8.11 (the oldest supported)', oldestPg as unknown as typeof pg],
])('a flight with opening and closing statements, %s', (_name, driver) => {
  // A client that never connects: its class and connection are all a flight needs to be defined.
  const Flight = firstFlightClass(new driver.Client() as unknown as pg.PoolClient) as FirstFlightClass;
  const build = () =>
    new Flight(
      ['SAVEPOINT s', { text: 'SELECT pg_advisory_xact_lock($1::bigint)', values: [42n] }],
      'INSERT INTO t VALUES ($1) RETURNING id',
      [new Date(0)],
      ['RELEASE SAVEPOINT s'],
    ) as FirstFlightQuery & PgQueryMessages;

  it('writes every statement, in order, with ONE Sync at the end; values go through pg own mapper', () => {
    const { written, connection } = recordingConnection();
    build().prepare(connection);
    const methods = written.map(([method]) => method);
    expect(methods).toEqual([
      ...['parse', 'bind', 'execute'], // SAVEPOINT
      ...['parse', 'bind', 'execute'], // the lock, no Describe: no row description for it
      ...['parse', 'bind', 'describe', 'execute'], // the statement, as pg's own Query writes it
      ...['parse', 'bind', 'execute'], // RELEASE
      'sync',
    ]);
    expect(written.filter(([m]) => m === 'parse').map(([, a]) => (a as { text: string }).text)).toEqual([
      'SAVEPOINT s',
      'SELECT pg_advisory_xact_lock($1::bigint)',
      'INSERT INTO t VALUES ($1) RETURNING id',
      'RELEASE SAVEPOINT s',
    ]);
    const binds = written.filter(([m]) => m === 'bind').map(([, values]) => values);
    expect(binds[1]).toEqual(['42']);
    expect(typeof (binds[2] as unknown[])[0]).toBe('string'); // the Date, as pg serializes it
  });

  it("writes an opening of texts (BEGIN, its SET LOCALs) as ONE buffer, byte for byte what pg's own connection writes", () => {
    const opening = [
      'BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY',
      "SET LOCAL application_name = 'é ü'",
      '',
    ];
    // pg's own bytes: its connection's parse/bind/execute, each written through its _send.
    const own: Buffer[] = [];
    const pgConnection = Object.create(
      (driver as unknown as { Connection: { prototype: object } }).Connection.prototype,
    ) as Record<string, (argument?: unknown) => void>;
    pgConnection._send = (buffer) => {
      own.push(Buffer.from(buffer as Buffer));
    };
    for (const text of opening) {
      pgConnection.parse?.({ text });
      pgConnection.bind?.({});
      pgConnection.execute?.({});
    }
    const { written, connection } = recordingConnection();
    const sent: Buffer[] = [];
    const withSend = {
      ...connection,
      _send: (buffer: Buffer) => {
        sent.push(Buffer.from(buffer));
        written.push(['_send', undefined]);
      },
    };
    const flight = new Flight(opening, 'SELECT 1', undefined) as FirstFlightQuery & PgQueryMessages;
    flight.prepare(withSend);
    expect(written.map(([method]) => method)).toEqual([
      '_send',
      'parse',
      'bind',
      'describe',
      'execute',
      'sync',
    ]);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.equals(Buffer.concat(own))).toBe(true);
    // The same list again: the same bytes (kept with the list, not serialized again).
    const again: Buffer[] = [];
    (new Flight(opening, 'SELECT 2', undefined) as FirstFlightQuery & PgQueryMessages).prepare({
      ...connection,
      _send: (buffer: Buffer) => again.push(Buffer.from(buffer)),
    });
    expect(again[0]?.equals(Buffer.concat(own))).toBe(true);
  });

  it("only the statement's own rows and command are the result; the answers around it are dropped", async () => {
    const flight = build();
    const con = recordingConnection().connection;
    flight.handleCommandComplete({ text: 'SAVEPOINT' }, con);
    flight.handleDataRow({ fields: [''] }); // the lock's row (void)
    flight.handleCommandComplete({ text: 'SELECT 1' }, con);
    flight.handleRowDescription({ fields: [{ name: 'id', dataTypeID: 25, format: 'text' }] });
    flight.handleDataRow({ fields: ['7'] });
    flight.handleCommandComplete({ text: 'INSERT 0 1' }, con);
    flight.handleCommandComplete({ text: 'RELEASE' }, con);
    flight.handleReadyForQuery(con);
    const result = await flight;
    expect([result.command, result.rowCount, result.rows]).toEqual(['INSERT', 1, [{ id: '7' }]]);
    expect(flight.failedPart).toBeUndefined();
  });

  it("a row of the statement pg cannot parse is the statement's failure, though reported after the closing ones", async () => {
    const parseError = new Error('cannot parse this row');
    const types = {
      getTypeParser: () => () => {
        throw parseError;
      },
    };
    const flight = new Flight(
      ['SAVEPOINT s'],
      { text: 'SELECT 1 AS n', types } as pg.QueryConfig,
      undefined,
      ['RELEASE SAVEPOINT s'],
    ) as FirstFlightQuery & PgQueryMessages;
    const con = recordingConnection().connection;
    flight.handleCommandComplete({ text: 'SAVEPOINT' }, con);
    flight.handleRowDescription({ fields: [{ name: 'n', dataTypeID: 23, format: 'text' }] });
    flight.handleDataRow({ fields: ['1'] });
    flight.handleCommandComplete({ text: 'SELECT 1' }, con);
    flight.handleCommandComplete({ text: 'RELEASE' }, con);
    flight.handleReadyForQuery(con);
    await expect(Promise.resolve(flight)).rejects.toBe(parseError);
    expect(flight.failedPart).toBe('statement');
  });

  it.each([
    [0, 'opening'],
    [1, 'opening'],
    [2, 'statement'],
    [3, 'closing'],
  ] as const)('an error after %i answers came from the %s', async (answered, part) => {
    const flight = build();
    const con = recordingConnection().connection;
    for (let n = 0; n < answered; n++) flight.handleCommandComplete({ text: 'SELECT 1' }, con);
    const error = new Error('refused');
    flight.handleError(error, con);
    await expect(Promise.resolve(flight)).rejects.toBe(error);
    expect(flight.failedPart).toBe(part);
    expect(flight.beginFailed).toBe(part === 'opening');
    expect(flight.openingDone).toBe(Math.min(answered, 2));
  });
});
