import type pg from 'pg';
import type { FlightPart, FlightStatement } from './first-flight.js';

/**
 * One statement with statements ahead of it and behind it that travel with it: `SAVEPOINT`, the
 * statement, `RELEASE SAVEPOINT`; or an advisory lock, then the statement it guards.
 */
export interface FlightSpec {
  /** Sent ahead of the statement, in order; their answers are dropped. */
  readonly opening: readonly FlightStatement[];
  /** The statement whose result is returned. */
  readonly text: string;
  readonly values: readonly unknown[];
  /** Sent behind the statement, in order, once it has succeeded; their answers are dropped. */
  readonly closing: readonly FlightStatement[];
}

/**
 * How a flight ended (never a rejection): the statement's result (pg's own), or the error (pg's own,
 * or what the transaction shows for it, as `tx.query` would have thrown) and the part it came from. A failure in
 * the `opening` means the statement never ran; in the `statement`, that no closing statement ran.
 */
export type FlightOutcome<R extends pg.QueryResultRow = Record<string, unknown>> =
  | { readonly ok: true; readonly result: pg.QueryResult<R> }
  | { readonly ok: false; readonly part: FlightPart; readonly error: unknown };
