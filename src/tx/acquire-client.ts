import { err, ok, type Result } from 'neverthrow';
import type pg from 'pg';
import { classifyOrRethrow, type DatabaseFailure, PoolExhausted } from '../errors/index.js';

/** How {@link acquireClient} waits. */
export interface AcquireOptions {
  /** Give up with `PoolExhausted` after this long (undefined: the pool's own connectionTimeoutMillis). */
  readonly timeoutMs?: number | undefined;
  /**
   * Refuse at once with `PoolExhausted` when the pool has no free client. Used for `requiresNew`
   * inside a transaction: the caller already holds a client, so waiting could wait on itself forever.
   */
  readonly failFast: boolean;
}

/** What {@link freeClients} reads of a pool. */
export type PoolCounters = Pick<pg.Pool, 'options' | 'idleCount' | 'totalCount' | 'waitingCount'>;

/** Clients the pool could hand out right now without anyone waiting: idle ones plus room to grow. */
export function freeClients(pool: PoolCounters): number {
  const max = (pool.options as { max?: number } | undefined)?.max ?? 10;
  return pool.idleCount + Math.max(0, max - pool.totalCount) - pool.waitingCount;
}

/**
 * Checks a client out of `pool` (through `connect`, the pool's unpatched connect), failing fast or
 * after a timeout with {@link PoolExhausted}, and classifying connection failures (`ConnectionLost`).
 * A client that arrives after the timeout is released at once, never leaked. Anything that is not a
 * database failure is a defect and rejects.
 *
 * @example
 * const client = await acquireClient(pool, () => pool.connect(), { failFast: true, timeoutMs: 2000 });
 */
export async function acquireClient(
  pool: pg.Pool,
  connect: () => Promise<pg.PoolClient>,
  options: AcquireOptions,
): Promise<Result<pg.PoolClient, DatabaseFailure>> {
  if (options.failFast && freeClients(pool) <= 0) {
    const max = (pool.options as { max?: number } | undefined)?.max ?? 10;
    return err(
      new PoolExhausted(
        `requiresNew inside a transaction needs a second client, but all ${max} are checked out ` +
          `(${pool.waitingCount} waiting); waiting would deadlock on our own transaction. Enlarge the pool or avoid requiresNew here`,
      ),
    );
  }
  if (options.timeoutMs === undefined) {
    // No timeout of ours: the pool's own wait (one promise, no timer).
    return connect().then(
      (client) => ok(client),
      (error: unknown) => err(classifyOrRethrow(error)),
    );
  }
  try {
    const pending = connect();
    const timeoutMs = options.timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        timedOut = true;
        reject(new PoolExhausted(`no client within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    // A client that shows up after we gave up goes straight back to the pool.
    pending.then(
      (client) => {
        if (timedOut) client.release();
      },
      () => {},
    );
    try {
      return ok(await Promise.race([pending, timeout]));
    } finally {
      clearTimeout(timer);
    }
  } catch (error) {
    // Our own PoolExhausted (the timeout above) is a database failure already: it comes back as it is.
    return err(classifyOrRethrow(error));
  }
}
