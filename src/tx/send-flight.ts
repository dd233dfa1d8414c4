import type pg from 'pg';
import {
  type FirstFlightQuery,
  type FlightPart,
  type FlightStatement,
  firstFlightClass,
  fitsFirstFlight,
} from './first-flight.js';
import type { FlightOutcome, FlightSpec } from './flight-spec.js';
import { TxHandle } from './tx-handle.js';
import type { Db, Queryable } from './types.js';

export type { FlightOutcome, FlightSpec } from './flight-spec.js';

/**
 * Sends `spec` on `db` in ONE round trip where the driver lets us (pg's JavaScript client, directly or
 * through a `tm.do` transaction, on every supported pg and on `pipeline: true` pools): every message
 * up to one Sync, so that when a statement fails the server discards everything behind it (see
 * first-flight.ts). Elsewhere (pg-native, a queryable of the user's own, a statement that cannot
 * travel in a flight) the statements go one by one, stopping at the first failure: the same outcome,
 * one round trip each.
 *
 * Measured (bench/pattern-flight, 1 ms each way through a proxy): Bookings.book inside a transaction,
 * 3 round trips → 1.
 *
 * @example
 * const sent = await sendFlight(tx, { opening: ['SAVEPOINT s'], text: 'INSERT …', values: [1], closing: ['RELEASE SAVEPOINT s'] });
 * if (!sent.ok && sent.part === 'statement') await tx.query('ROLLBACK TO SAVEPOINT s');
 */
export async function sendFlight<R extends pg.QueryResultRow = Record<string, unknown>>(
  db: Db,
  spec: FlightSpec,
): Promise<FlightOutcome<R>> {
  if (db instanceof TxHandle) {
    const sent = db.flight<R>(spec);
    if (sent !== undefined) return sent;
  } else if (fitsFirstFlight(spec.text, spec.values)) {
    const Flight = firstFlightClass(db as pg.PoolClient);
    if (Flight !== undefined) {
      let flight: FirstFlightQuery | undefined;
      try {
        flight = new Flight(spec.opening, spec.text, spec.values, spec.closing);
        // pg returns a Submittable as it was given: the flight itself, a promise of pg's own result.
        const result = await (db as pg.PoolClient).query(flight as unknown as pg.QueryConfig);
        return { ok: true, result: result as pg.QueryResult<R> };
      } catch (error) {
        // Without a flight, pg refused its config: nothing was sent.
        return { ok: false, part: flight?.failedPart ?? 'opening', error };
      }
    }
  }
  return sendOneByOne<R>(db as Queryable, spec);
}

/** The statements of `spec` one round trip each, stopping at the first failure. */
async function sendOneByOne<R extends pg.QueryResultRow>(
  db: Queryable,
  spec: FlightSpec,
): Promise<FlightOutcome<R>> {
  let part: FlightPart = 'opening';
  try {
    for (const statement of spec.opening) await send(db, statement);
    part = 'statement';
    const result = await db.query<R>(spec.text, spec.values);
    part = 'closing';
    for (const statement of spec.closing) await send(db, statement);
    return { ok: true, result };
  } catch (error) {
    return { ok: false, part, error };
  }
}

function send(db: Queryable, statement: FlightStatement): Promise<unknown> {
  return typeof statement === 'string' ? db.query(statement) : db.query(statement.text, statement.values);
}
