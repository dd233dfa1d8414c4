import { err, errAsync, ok, type Result, type ResultAsync } from 'neverthrow';
import { z } from 'zod/v4';
import { classify, type InvalidOptions, LockBusy, LockNotAvailable, type TxError } from '../errors/index.js';
import { traceLockWait } from '../observability/lock-telemetry.js';
import { timeoutSchema } from '../tx/duration.js';
import { isResult } from '../tx/is-result.js';
import { sendFlight } from '../tx/send-flight.js';
import type { TxManager } from '../tx/tx-manager.js';
import type { ConstraintErrors } from '../tx/tx-manager-options.js';
import type { TxOptions } from '../tx/tx-options.js';
import type { Queryable, Tx } from '../tx/types.js';
import { type AnyAdvisoryKey, formatAdvisoryKey, isAdvisoryKey, sortedUniqueKeys } from './advisory-key.js';
import { invalid, parseOptions } from './parse-options.js';

const withAdvisoryLockOptionsSchema = z
  .object({
    /**
     * 'block' (default): wait for the lock (bounded by `lockTimeout`); 'try': never wait — if any key
     * is held by another transaction, return `LockBusy` without calling `fn`.
     */
    wait: z.enum(['block', 'try']).default('block'),
    /**
     * Longest wait for the lock(s) with `wait: 'block'`; past it → `LockNotAvailable` (55P03). Applies
     * to the lock acquisition only (set with `set_config(…, is_local)` and restored right after), so
     * `fn`'s own statements keep the transaction's lock_timeout. Default: the transaction's setting
     * (the TxManager's `lockTimeout`, else the server's, which is "wait forever").
     */
    lockTimeout: timeoutSchema.optional(),
    /** Options for the `tm.do` transaction (isolation, propagation, name, maxAttempts …). */
    tx: z.custom<TxOptions>((v) => typeof v === 'object' && v !== null).optional(),
  })
  .strict();

/** Options of {@link withAdvisoryLock}. */
export type WithAdvisoryLockOptions = z.input<typeof withAdvisoryLockOptionsSchema>;

/** What the callback of {@link withAdvisoryLock} may return: a value, or a neverthrow `Result`. */
export type LockedCallback<T, E> = (
  tx: Tx,
) => T | Result<T, E> | Promise<T | Result<T, E>> | ResultAsync<T, E>;

/** Errors {@link withAdvisoryLock} adds to those of `fn` and of the transaction. */
export type AdvisoryLockError = LockBusy | LockNotAvailable | InvalidOptions;

/**
 * Runs `fn` inside a transaction that holds transaction-scoped advisory lock(s) on `keys`
 * (`pg_advisory_xact_lock` / `pg_try_advisory_xact_lock`).
 *
 * - Runs through `tm.do`: joins the current transaction when there is one (the lock then lasts until
 *   that outer transaction ends), else starts one. The locks are released by COMMIT or ROLLBACK — also
 *   when the connection dies, because the server aborts the transaction — so they cannot leak into a
 *   pool the way session locks do through a pooled or serverless connection.
 * - Several keys are deduplicated, sorted (bigint keys ascending, then pairs) and taken in ONE statement
 *   in that order, so two callers naming the same keys in any order cannot deadlock.
 * - `wait: 'try'`: if any key is busy → `Err(LockBusy)` with the busy keys and `fn` is NOT called.
 *   With several keys, the ones that were free stay held until the transaction ends (rolled back at
 *   once when this call owns the transaction).
 * - `wait: 'block'` with `lockTimeout`: a wait longer than that → `Err(LockNotAvailable)`. It is
 *   returned as a value and NOT retried here (even though TxManager retries 55P03 by default): the
 *   bound is the whole wait; retrying is the caller's choice (with jitter, so that waiters do not retry in step). Inside an
 *   outer transaction, that transaction is aborted by the 55P03 (PostgreSQL semantics) — use
 *   `tx: { propagation: 'nested' }` to contain it in a savepoint.
 * - Any other database error in `fn` follows `tm.do`'s rules (classified, retried when retryable:
 *   the whole callback, lock included, runs again).
 *
 * A lock is not idempotency: it prevents simultaneous runs, not repeated ones — see {@link singleRun}.
 *
 * @example
 * const key = advisoryKey('tenant-migration', tenantId);
 * const result = await withAdvisoryLock(tm, key, (tx) => migrateTenant(tx, tenantId), {
 *   wait: 'try',
 * });
 * if (result.isErr() && result.error.kind === 'LockBusy') console.log('another replica is migrating');
 */
export function withAdvisoryLock<T, E = never, C extends Record<string, unknown> = Record<never, never>>(
  tm: TxManager<C>,
  keys: AnyAdvisoryKey | readonly AnyAdvisoryKey[],
  fn: LockedCallback<T, E>,
  options: WithAdvisoryLockOptions = {},
): ResultAsync<T, E | AdvisoryLockError | TxError | ConstraintErrors<C>> {
  const parsed = parseOptions(withAdvisoryLockOptionsSchema, options);
  if (parsed.isErr()) return errAsync(parsed.error);
  const list = normalizeKeys(keys);
  if (list.isErr()) return errAsync(list.error);
  const { wait, lockTimeout, tx: txOptions } = parsed.value;
  return tm.do(async (tx: Tx): Promise<Result<T, E | LockBusy | LockNotAvailable>> => {
    const locked = await traceLockWait(
      tm.telemetry,
      { scope: 'transaction', wait, keys: list.value.map(formatAdvisoryKey), connection: tm.pool.options },
      () => acquireXactLocks(tx, list.value, { wait, lockTimeout }),
    );
    if (locked.isErr()) return err(locked.error);
    return toResult<T, E>(await fn(tx));
  }, txOptions) as ResultAsync<T, E | AdvisoryLockError | TxError | ConstraintErrors<C>>;
}

/** Validates and orders the keys: deduplicated, sorted, at least one. */
export function normalizeKeys(
  keys: AnyAdvisoryKey | readonly AnyAdvisoryKey[],
): Result<AnyAdvisoryKey[], InvalidOptions> {
  const list: readonly unknown[] = Array.isArray(keys) ? keys : [keys];
  if (list.length === 0) return err(invalid(['keys'], 'at least one advisory key is required'));
  for (const [i, key] of list.entries()) {
    if (!isAdvisoryKey(key)) {
      return err(
        invalid(
          ['keys', i],
          'not an advisory key: use advisoryKey() (bigint) or advisoryKeyPair() (two int32)',
        ),
      );
    }
  }
  return ok(sortedUniqueKeys(list as AnyAdvisoryKey[]));
}

// Transaction-scoped advisory locks (ExclusiveLock on each advisory tag; held until COMMIT/ROLLBACK,
// or until the session dies). One statement takes every key in the order of the arrays, which the
// caller sorted: volatile functions in the target list run after ORDER BY, one row at a time, so all
// callers acquire in the same global order and cannot deadlock on each other.
const BLOCK_SQL = `SELECT CASE WHEN u.k IS NOT NULL THEN pg_advisory_xact_lock(u.k)
            ELSE pg_advisory_xact_lock(u.a, u.b) END AS locked
  FROM unnest($1::bigint[], $2::int4[], $3::int4[]) WITH ORDINALITY AS u(k, a, b, n)
 ORDER BY u.n`;

// Same locks, never waiting (pg_try_advisory_xact_lock returns false when another transaction holds
// the tag). Every key is tried (in order) so the answer names all the busy ones.
const TRY_SQL = `SELECT u.n, CASE WHEN u.k IS NOT NULL THEN pg_try_advisory_xact_lock(u.k)
            ELSE pg_try_advisory_xact_lock(u.a, u.b) END AS acquired
  FROM unnest($1::bigint[], $2::int4[], $3::int4[]) WITH ORDINALITY AS u(k, a, b, n)
 ORDER BY u.n`;

// No lock: reads the current lock_timeout and sets a transaction-local one (SET LOCAL semantics).
// Evaluated left to right: `previous` is read before set_config replaces it.
const SET_TIMEOUT_SQL = `SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $1, true) AS applied`;

// No lock: restores the transaction-local lock_timeout that was in force before the acquisition.
const RESTORE_TIMEOUT_SQL = `SELECT set_config('lock_timeout', $1, true) AS restored`;

/**
 * Takes transaction-scoped advisory locks on `keys` (already sorted and deduplicated) on `tx`, which
 * must be inside a transaction. The building block of {@link withAdvisoryLock} and `singleRun`.
 *
 * @example
 * const locked = await acquireXactLocks(tx, [key], { wait: 'try' });
 * if (locked.isErr()) return err(locked.error); // LockBusy
 */
export async function acquireXactLocks(
  tx: Queryable,
  keys: readonly AnyAdvisoryKey[],
  options: { readonly wait: 'block' | 'try'; readonly lockTimeout?: number | undefined },
): Promise<Result<void, LockBusy | LockNotAvailable>> {
  const k = keys.map((key) => (typeof key === 'bigint' ? key : null));
  const a = keys.map((key) => (typeof key === 'bigint' ? null : key.namespace));
  const b = keys.map((key) => (typeof key === 'bigint' ? null : key.id));
  if (options.wait === 'try') {
    const { rows } = await tx.query<{ n: string; acquired: boolean }>(TRY_SQL, [k, a, b]);
    const busy = rows.filter((r) => !r.acquired).map((r) => keys[Number(r.n) - 1]);
    if (busy.length > 0)
      return err(new LockBusy(busy.map((key) => formatAdvisoryKey(key as AnyAdvisoryKey))));
    return ok(undefined);
  }
  if (options.lockTimeout === undefined) {
    try {
      await tx.query(BLOCK_SQL, [k, a, b]);
    } catch (error) {
      return lockRefused(error);
    }
    return ok(undefined);
  }
  // The bounded lock_timeout, then the locks behind it, in ONE round trip (see sendFlight): the lock
  // statement runs only once the timeout is set. 3 round trips → 2 (the restore needs `previous`).
  const sent = await sendFlight<{ previous: string }>(tx, {
    opening: [],
    text: SET_TIMEOUT_SQL,
    values: [`${options.lockTimeout}ms`],
    closing: [{ text: BLOCK_SQL, values: [k, a, b] }],
  });
  if (!sent.ok) {
    if (sent.part !== 'closing') throw sent.error;
    return lockRefused(sent.error);
  }
  const previous = sent.result.rows[0]?.previous;
  if (previous !== undefined) await tx.query(RESTORE_TIMEOUT_SQL, [previous]);
  return ok(undefined);
}

/** The lock statement failed: `LockNotAvailable` (lock_timeout) as a value, anything else rethrown. */
function lockRefused(error: unknown): Result<never, LockNotAvailable> {
  const failure = classify(error);
  if (failure instanceof LockNotAvailable) return err(failure);
  throw error;
}

/** A callback's return value as a Result (a plain value is `ok`). */
export function toResult<T, E>(value: T | Result<T, E>): Result<T, E> {
  if (isResult(value)) return value as Result<T, E>;
  return ok(value as T);
}
