import type pg from 'pg';

/** The name of the listener, so that it is installed once per pool however many queues share it. */
const LISTENER_NAME = 'pgTxkitGuardClientErrors';

/**
 * Gives every new client of `pool` a permanent no-op `'error'` listener, so that a connection error
 * can never crash the process as an uncaught `'error'` event.
 *
 * Why (found by test/reliability/mixed-workload.test.ts, reproduced deterministically by
 * test/reliability/pool-connect-race.test.ts): pg-pool removes its own idle `'error'` listener when it
 * hands a client out, and a `pool.connect()` caller can attach its listener only after the promise
 * resolves, a microtask later. When the client is fresh, the hand-out happens inside the socket parser
 * (on ReadyForQuery), which goes on synchronously with the rest of the TCP chunk: a FATAL 57P01 that
 * arrived in the same chunk (a backend terminated right after start-up, a server restart, a stalled
 * proxy flushing) is emitted as `'error'` on a client nobody listens to yet. The error is not lost:
 * the client is marked unusable, its next query fails with "not queryable" (classified
 * `ConnectionLost`, so a transaction retries on another client) and the pool drops it on release.
 *
 * @example
 * guardClientErrors(pool); // in the TxManager and Queue constructors
 */
export function guardClientErrors(pool: pg.Pool): void {
  if (typeof pool.listeners !== 'function') return; // not an EventEmitter (a pool-like test double)
  if (pool.listeners('connect').some((listener) => listener.name === LISTENER_NAME)) return;
  pool.on('connect', function pgTxkitGuardClientErrors(client: pg.PoolClient) {
    client.on('error', () => {});
  });
}
