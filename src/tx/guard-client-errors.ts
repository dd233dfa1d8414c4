import type pg from 'pg';
import { RateLimitedConsole } from '../observability/rate-limited-console.js';

/** The name of the listener, so that it is installed once per pool however many queues share it. */
const LISTENER_NAME = 'pgTxkitGuardClientErrors';
/** The name of the pool-level listener (installed once per pool). */
const POOL_LISTENER_NAME = 'pgTxkitReportPoolError';
/** Where the reporters of a pool live: a property of that pool (no module-level state). */
const REPORTERS = Symbol.for('pg-txkit.pool-error-reporters');

/** Reports an error pg-pool emitted on the pool (an idle client's connection failed). */
export type PoolErrorReporter = (error: Error) => void;

interface Reporters {
  readonly reporters: Set<PoolErrorReporter>;
  /** Without a reporter: the rate-limited console line of this pool. */
  readonly console: RateLimitedConsole;
}

function reportersOf(pool: pg.Pool): Reporters {
  const holder = pool as unknown as { [REPORTERS]?: Reporters };
  let found = holder[REPORTERS];
  if (found === undefined) {
    found = { reporters: new Set(), console: new RateLimitedConsole() };
    Object.defineProperty(pool, REPORTERS, { value: found, enumerable: false });
  }
  return found;
}

/**
 * Makes sure no connection error can crash the process as an uncaught `'error'` event, in the
 * README's own setup (`new pg.Pool()` with no `pool.on('error')`), and that such an error is never
 * silenced without a trace.
 *
 * Two places where pg emits `'error'` with nobody listening:
 *
 * 1. The POOL. pg-pool re-emits on the pool the error of an IDLE client whose connection failed (the
 *    server restarted, a failover, `idle_session_timeout`, a serverless proxy cutting idle sessions,
 *    `pg_terminate_backend`). With no listener on the pool, Node throws it and the process dies. A
 *    pool-level listener is added; each error goes to `report` (the TxManager's `onPoolError` hook);
 *    when no reporter was given and the user has no listener of their own, one line goes to
 *    `console.error`, at most once a minute per pool. pg-pool has already dropped the client; the next
 *    checkout opens a fresh connection.
 * 2. A client being handed out (found by test/reliability/mixed-workload.test.ts, reproduced by
 *    test/reliability/pool-connect-race.test.ts): pg-pool removes its own idle `'error'` listener when
 *    it hands a client out, and a `pool.connect()` caller can attach its listener only a microtask
 *    later. A FATAL that arrived in the same TCP chunk as ReadyForQuery is emitted in between. Every
 *    new client gets a permanent no-op listener; the error is not lost: the client is marked unusable,
 *    its next query fails with "not queryable" (`ConnectionLost`) and the pool drops it on release.
 *
 * @example
 * guardClientErrors(pool, (error) => logger.warn({ err: error }, 'idle connection failed'));
 */
export function guardClientErrors(pool: pg.Pool, report?: PoolErrorReporter): void {
  if (typeof pool.listeners !== 'function') return; // not an EventEmitter (a pool-like test double)
  const state = reportersOf(pool);
  if (report !== undefined) state.reporters.add(report);
  if (!pool.listeners('error').some((listener) => listener.name === POOL_LISTENER_NAME)) {
    pool.on('error', function pgTxkitReportPoolError(error: Error) {
      if (state.reporters.size > 0) {
        for (const reporter of state.reporters) {
          try {
            reporter(error);
          } catch {
            // A throwing reporter must not turn a handled error into a crash.
          }
        }
        return;
      }
      // The user listens on the pool themselves: theirs is the report.
      if (pool.listenerCount('error') > 1) return;
      state.console.line(
        'pool-error',
        `pg-txkit: an idle pooled connection failed (${error.message}); the pool dropped it and opens a ` +
          "new one when needed. Handle these with the TxManager's logger or onPoolError hook, or pool.on('error')",
      );
    });
  }
  if (pool.listeners('connect').some((listener) => listener.name === LISTENER_NAME)) return;
  pool.on('connect', function pgTxkitGuardClientErrors(client: pg.PoolClient) {
    client.on('error', () => {});
  });
}
