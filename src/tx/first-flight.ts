import type pg from 'pg';

/**
 * The first flight of an attempt: BEGIN, its `SET LOCAL`s and the callback's first statement, written
 * as extended-protocol messages (Parse/Bind/Execute for each) followed by ONE Sync, in one write.
 *
 * Why a statement behind a refused BEGIN can never run: the server treats every message up to a Sync
 * as one unit. When BEGIN, a `SET LOCAL` or anything else in it fails, the server answers with the
 * error and then reads and DISCARDS every message until the Sync (PostgreSQL's protocol, "Extended
 * Query": "the backend issues ErrorResponse, then reads and discards messages until a Sync is
 * reached"). The statement behind it is parsed, bound and executed only after BEGIN and every
 * `SET LOCAL` have completed in the same unit. A connection cut between them ends the session, and with
 * it the transaction. (One Sync per statement, as pg's own pipelining writes it, would not do: each
 * Sync closes a unit, so the statement after a refused BEGIN would run in autocommit.)
 *
 * The flight is a subclass of the user's own pg `Query` (`Client.Query`, found on the client's class:
 * no import of pg, no `instanceof` across copies): rows, `rowMode`, `types`, the client's type
 * parsers, errors and the result are pg's own. Only the answers to the opening statements are held
 * back (they produce no rows, only a CommandComplete each), so the result is exactly what
 * `client.query(config)` would have resolved with.
 *
 * The same flight carries the patterns' own statements (send-flight.ts): statements behind the query's
 * own too (a RELEASE SAVEPOINT), which run only once it has succeeded (a failing statement makes the
 * server discard them up to the Sync), and statements with values ahead of it (an advisory lock). Their
 * answers are held back as the opening's are; an error says which part it came from (`failedPart`).
 *
 * Measured: with a 10 ms round trip, a one-statement `tm.do` takes 23.7 ms (two round trips) where a
 * hand-written `BEGIN; UPDATE; COMMIT` takes 34.9 ms; 8 loops with 1 ms each way, 1.40× the
 * hand-written loop (0.99× with BEGIN in its own round trip). On localhost with the server on the same
 * 2 cores (bench/tx-overhead) the loops are CPU-bound and it is level with the hand-written loop.
 */

/** What a pg `Query` instance of any supported version offers the subclass. */
interface PgQuery {
  text?: unknown;
  values?: unknown;
  name?: unknown;
  rows?: unknown;
  callback?: unknown;
  handleCommandComplete(message: unknown, connection: unknown): void;
  handleDataRow(message: unknown): void;
  handleEmptyQuery(connection: unknown): void;
  handleError(error: unknown, connection: unknown): void;
  handleReadyForQuery(connection: unknown): void;
  prepare(connection: unknown): void;
  submit(connection: unknown): Error | null;
}

/** pg's `Client.Query` constructor. */
type PgQueryClass = new (
  config: unknown,
  values: unknown,
  callback: (error: Error | null, result: unknown) => void,
) => PgQuery;

/**
 * A statement written ahead of (opening) or behind (closing) the flight's own: its text, with the
 * values it takes, if any (serialized by pg exactly as for a query of its own). Its answer is held back:
 * only the flight's own statement has a result.
 */
export type FlightStatement = string | { readonly text: string; readonly values: readonly unknown[] };

/**
 * Which part of a flight an error came from: an opening statement (or the connection ended before they
 * had all completed: the flight's own statement never ran), the flight's own statement, or a closing
 * statement (the flight's own statement had completed).
 */
export type FlightPart = 'opening' | 'statement' | 'closing';

/**
 * The flight as the attempt sees it: a promise of pg's result (a thenable, so that a client class
 * whose `query` wraps pg's and chains on what it returns, as instrumentation does, keeps working).
 */
export interface FirstFlightQuery extends PromiseLike<pg.QueryResult> {
  /** Set when the error came before every opening statement had completed: the statement never ran. */
  readonly beginFailed: boolean;
  /** Where the error the flight rejected with came from; undefined while it has not failed. */
  readonly failedPart: FlightPart | undefined;
  /** How many of the opening statements completed. */
  readonly openingDone: number;
  /** The statements written ahead of the query's own (BEGIN, then each SET LOCAL …), in order. */
  readonly opening: readonly FlightStatement[];
  /** The statements written behind the query's own (a RELEASE SAVEPOINT …), in order. */
  readonly closing: readonly FlightStatement[];
  catch(onRejected: (error: unknown) => unknown): Promise<unknown>;
  finally(onFinally: () => void): Promise<pg.QueryResult>;
}

/** Builds a flight: `(opening statements, the user's config, values, closing statements)`. */
export type FirstFlightClass = new (
  opening: readonly FlightStatement[],
  config: string | pg.QueryConfig,
  values: readonly unknown[] | undefined,
  closing?: readonly FlightStatement[],
) => FirstFlightQuery;

/** The messages a pg `Query` writes to its connection, recorded so they can be written in one flight. */
interface Recorded {
  readonly method: 'parse' | 'bind' | 'describe' | 'execute' | 'close' | 'flush';
  readonly argument: unknown;
}

/** A connection stand-in that records what `Query.prototype.prepare` writes (the Sync is ours to write). */
function recorder(calls: Recorded[]): Record<string, unknown> {
  const record = (method: Recorded['method']) => (argument: unknown) => {
    calls.push({ method, argument });
  };
  return {
    parse: record('parse'),
    bind: record('bind'),
    describe: record('describe'),
    execute: record('execute'),
    close: record('close'),
    flush: record('flush'),
    sync: () => {},
    parsedStatements: {},
    submittedNamedStatements: {},
  };
}

/** Writes a recorded message to the real connection. */
function replay(con: Connection, call: Recorded): void {
  (con[call.method] as (argument: unknown) => void).call(con, call.argument);
}

/** The pg connection methods a flight writes with. */
interface Connection {
  parse(config: { text: string }): void;
  bind(config: Record<string, unknown>): void;
  execute(config: Record<string, unknown>): void;
  sync(): void;
  stream?: { cork?: () => void; uncork?: () => void };
  [method: string]: unknown;
}

const classes = new WeakMap<object, FirstFlightClass>();

/**
 * The opening statements of a flight, when every one is a text without values, as the bytes pg would
 * write for them (Parse, Bind, Execute each: unnamed statement and portal, no parameter types, text
 * results), in ONE buffer; null when a statement has values (pg's own mapper serializes those). Cached
 * by the opening list: the manager builds one list per settings, so BEGIN and its SET LOCALs are
 * serialized once, not once per transaction.
 *
 * Why not fewer messages: BEGIN and its SET LOCALs as ONE simple Query message would not be discarded
 * up to the Sync when refused (after a failed simple Query the server answers ReadyForQuery and runs the
 * messages behind it: the statement would run in autocommit). Why unnamed: a prepared (named) BEGIN
 * would spare the server its parse once per connection, but behind PgBouncer in transaction mode the
 * next transaction may get a server connection that never saw it.
 *
 * Measured with the per-transaction allocation cuts of tx-attempt.ts and tx-manager.ts, against the
 * build before them in the same interleaved rounds (bench/tx-overhead, 8 loops, 2 shared cores at load
 * 4–5.5): node CPU per `tm.do` 89 → 81 and 112 → 103 µs. This part alone was not separable from the
 * noise of that machine (± 5 µs).
 */
const openingBytes = new WeakMap<readonly FlightStatement[], Buffer | null>();

function serializedOpening(opening: readonly FlightStatement[]): Buffer | null {
  let bytes = openingBytes.get(opening);
  if (bytes !== undefined) return bytes;
  bytes = null;
  if (opening.every((statement) => typeof statement === 'string')) {
    const texts = opening as readonly string[];
    // Per statement: Parse 'P' len '' \0 text \0 int16 0; Bind 'B' len '' \0 '' \0 int16 0 int16 0
    // int16 1 int16 0 (one result format: text); Execute 'E' len '' \0 int32 0 (every row).
    const BIND = 15;
    const EXECUTE = 10;
    let size = 0;
    for (const text of texts) size += 1 + 4 + 1 + Buffer.byteLength(text, 'utf8') + 1 + 2 + BIND + EXECUTE;
    bytes = Buffer.alloc(size);
    let at = 0;
    for (const text of texts) {
      const textBytes = Buffer.byteLength(text, 'utf8');
      bytes[at] = 0x50; // 'P'
      bytes.writeInt32BE(4 + 1 + textBytes + 1 + 2, at + 1);
      at += 6; // code, length, empty statement name
      at += bytes.write(text, at, 'utf8') + 1;
      at += 2; // no parameter types
      bytes[at] = 0x42; // 'B'
      bytes.writeInt32BE(BIND - 1, at + 1);
      bytes.writeInt16BE(1, at + 11); // one result format code …
      at += BIND; // … text (0); empty portal and statement names, no parameter formats, no parameters
      bytes[at] = 0x45; // 'E'
      bytes.writeInt32BE(EXECUTE - 1, at + 1);
      at += EXECUTE; // empty portal name, no row limit
    }
  }
  openingBytes.set(opening, bytes);
  return bytes;
}

/**
 * The flight class for this client's pg, or undefined when the client is not pg's JavaScript client of
 * a supported version (pg-native, a client class of the user's own): those keep BEGIN in its own
 * round trip.
 *
 * @example
 * const Flight = firstFlightClass(client);
 * if (Flight) await client.query(new Flight(['BEGIN'], 'UPDATE t SET n = n + 1', undefined));
 */
export function firstFlightClass(client: pg.PoolClient): FirstFlightClass | undefined {
  const ClientClass = (client as { constructor?: unknown }).constructor;
  if (typeof ClientClass !== 'function') return undefined;
  const Base = (ClientClass as { Query?: unknown }).Query;
  if (typeof Base !== 'function') return undefined;
  const cached = classes.get(Base);
  if (cached !== undefined) return cached;
  const proto = (Base as { prototype?: Record<string, unknown> }).prototype;
  if (
    proto === undefined ||
    typeof proto.prepare !== 'function' ||
    typeof proto.handleCommandComplete !== 'function' ||
    typeof proto.handleDataRow !== 'function' ||
    typeof proto.handleEmptyQuery !== 'function' ||
    typeof proto.handleError !== 'function' ||
    typeof proto.handleReadyForQuery !== 'function' ||
    typeof (client as { connection?: { parse?: unknown } }).connection?.parse !== 'function'
  ) {
    return undefined;
  }
  const flight = defineFlight(Base as PgQueryClass);
  classes.set(Base, flight);
  return flight;
}

function defineFlight(Base: PgQueryClass): FirstFlightClass {
  /**
   * Writes a statement ahead of or behind the flight's own: Parse/Bind/Execute, unnamed statement and
   * portal, no Describe (no row description for it).
   */
  const writeAround = (con: Connection, statement: FlightStatement): void => {
    if (typeof statement === 'string') {
      con.parse({ text: statement });
      con.bind({});
      con.execute({});
      return;
    }
    // With values: what pg's own Query writes for it (the values serialized by pg's own mapper).
    const calls: Recorded[] = [];
    new Base(statement.text, [...statement.values], () => {}).prepare(recorder(calls));
    for (const call of calls) if (call.method !== 'describe') replay(con, call);
  };

  return class FirstFlight extends Base implements FirstFlightQuery {
    readonly opening: readonly FlightStatement[];
    readonly closing: readonly FlightStatement[];
    /** CommandCompletes (or EmptyQueryResponses) received so far, of every part of the flight. */
    #completed = 0;
    /** pg could not serialize a value while writing the flight: reported once the server has answered. */
    #bindError: unknown;
    #failedPart: FlightPart | undefined;
    readonly #result: Promise<pg.QueryResult>;

    constructor(
      opening: readonly FlightStatement[],
      config: string | pg.QueryConfig,
      values: readonly unknown[] | undefined,
      closing: readonly FlightStatement[] = [],
    ) {
      let settle: (error: Error | null, result: unknown) => void = () => {};
      const result = new Promise<pg.QueryResult>((resolve, reject) => {
        settle = (error, res) => (error ? reject(error) : resolve(res as pg.QueryResult));
      });
      super(config, values, (error, res) => settle(error, res));
      this.#result = result;
      this.opening = opening;
      this.closing = closing;
    }

    // biome-ignore lint/suspicious/noThenProperty: the flight is awaited like the promise pg's query returns.
    then<A = pg.QueryResult, B = never>(
      onFulfilled?: ((value: pg.QueryResult) => A | PromiseLike<A>) | null,
      onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
    ): Promise<A | B> {
      return this.#result.then(onFulfilled, onRejected);
    }

    catch(onRejected: (error: unknown) => unknown): Promise<unknown> {
      return this.#result.catch(onRejected);
    }

    finally(onFinally: () => void): Promise<pg.QueryResult> {
      return this.#result.finally(onFinally);
    }

    get beginFailed(): boolean {
      return this.#failedPart === 'opening';
    }

    get failedPart(): FlightPart | undefined {
      return this.#failedPart;
    }

    get openingDone(): number {
      return Math.min(this.#completed, this.opening.length);
    }

    /** Always the extended protocol: a simple Query message cannot share a unit with the opening statements. */
    requiresPreparation(): boolean {
      return true;
    }

    /**
     * Writes the opening statements (Parse/Bind/Execute each, unnamed statement and portal), then the
     * messages pg's own `prepare` writes for the statement (recorded, so the same on every pg version),
     * then the closing statements, then ONE Sync — all corked into one write.
     */
    override prepare(connection: unknown): void {
      const con = connection as Connection;
      const own: Recorded[] = [];
      super.prepare(recorder(own));
      try {
        const opening = typeof con._send === 'function' ? serializedOpening(this.opening) : null;
        if (opening !== null) (con._send as (buffer: Buffer) => unknown).call(con, opening);
        else for (const statement of this.opening) writeAround(con, statement);
        for (const call of own) replay(con, call);
        for (const statement of this.closing) writeAround(con, statement);
      } catch (error) {
        // A value pg cannot serialize (a throwing toPostgres …): nothing from that statement on was
        // bound. The Sync still closes the unit (the statements before it run, as they did when each
        // was sent on its own), and the error is reported at ReadyForQuery, in order.
        this.#bindError = error;
      }
      con.sync();
    }

    /** Which part the server is answering now (for an error: the part that failed). */
    #part(): FlightPart {
      if (this.#completed < this.opening.length) return 'opening';
      if (this.#completed === this.opening.length || this.closing.length === 0) return 'statement';
      return 'closing';
    }

    override handleDataRow(message: unknown): void {
      // Rows of an opening or closing statement (a SELECT pg_advisory_xact_lock(…)): not the result's.
      if (this.#completed === this.opening.length) super.handleDataRow(message);
    }

    override handleCommandComplete(message: unknown, connection: unknown): void {
      // An opening or closing statement's answer: no rows, nothing for the result.
      if (this.#completed++ === this.opening.length) super.handleCommandComplete(message, connection);
    }

    override handleEmptyQuery(connection: unknown): void {
      if (this.#completed++ === this.opening.length) super.handleEmptyQuery(connection);
    }

    override handleError(error: unknown, connection: unknown): void {
      // Before every opening statement completed: one was refused (everything behind it was discarded
      // by the server), or the connection ended before they were answered. A row of the statement pg
      // could not parse (a type parser that threw) is reported at ReadyForQuery, after the closing
      // statements: it is the statement's (only its rows are parsed).
      const rowError = (this as { _canceledDueToError?: unknown })._canceledDueToError;
      this.#failedPart ??= rowError !== undefined && rowError !== false ? 'statement' : this.#part();
      super.handleError(error, connection);
    }

    override handleReadyForQuery(connection: unknown): void {
      if (this.#bindError !== undefined) {
        const error = this.#bindError;
        this.#bindError = undefined;
        this.#failedPart ??= this.#part();
        super.handleError(error, connection);
        return;
      }
      super.handleReadyForQuery(connection);
    }
  };
}

/**
 * Can this query of `tx.query` travel in the first flight? A string or a config object with text
 * only: a prepared statement (`name`: pg records it as parsed when the first ParseComplete of the
 * flight, BEGIN's, arrives), a portal read in pages (`rows`), a Submittable (a cursor) or a query
 * with its own callback go on their own after BEGIN. Without values, only one statement (pg would send
 * such a text with the simple protocol, which runs several statements; the extended protocol takes
 * one): any `;` before the end sends it on its own.
 */
export function fitsFirstFlight(
  text: string | pg.QueryConfig,
  values: readonly unknown[] | undefined,
): boolean {
  let sql: unknown;
  let hasValues = values !== undefined && values.length > 0;
  if (typeof text === 'string') {
    sql = text;
  } else {
    if (typeof text !== 'object' || text === null) return false;
    const config = text as pg.QueryConfig & Record<string, unknown>;
    if (
      typeof config.submit === 'function' ||
      config.name !== undefined ||
      config.rows !== undefined ||
      config.callback !== undefined
    ) {
      return false;
    }
    sql = config.text;
    if (values === undefined && Array.isArray(config.values) && config.values.length > 0) hasValues = true;
  }
  if (typeof sql !== 'string') return false;
  // COPY goes on its own after BEGIN: PostgreSQL ignores a Sync that arrives while it is in COPY IN
  // mode, so a COPY … FROM STDIN behind the flight's one Sync would wait forever for another.
  if (/^\s*copy\b/i.test(sql)) return false;
  if (hasValues) return true;
  const semicolon = sql.indexOf(';');
  return semicolon === -1 || sql.slice(semicolon).replace(/[\s;]/g, '') === '';
}
