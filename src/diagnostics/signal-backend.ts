import { err, ok, type Result, ResultAsync } from 'neverthrow';
import { z } from 'zod/v4';
import { classifyOrRethrow, type DatabaseFailure, InvalidOptions, NotFound } from '../errors/index.js';
import { durationSchema } from '../tx/duration.js';
import type { Queryable } from '../tx/types.js';

/** What a cancel or terminate did. */
export interface SignalResult {
  /** The backend signalled. */
  readonly pid: number;
  /**
   * True when the signal was sent (and, for terminate with a timeout, the backend exited in time).
   * False when the server refused quietly (a non-client process) or the wait timed out.
   */
  readonly signalled: boolean;
}

/**
 * Errors of {@link cancelBackend} / {@link terminateBackend}: `NotFound` (no backend with that pid;
 * `table` is 'pg_stat_activity'), `DbError` with code '42501' when the role may not signal it (it
 * needs to be the same role, a member of it, or of `pg_signal_backend`; superuser backends only by a
 * superuser), `InvalidOptions` for a bad pid, and connection failures.
 */
export type SignalError = NotFound | InvalidOptions | DatabaseFailure;

const pidSchema = z.number().int().positive().max(2_147_483_647);

const terminateOptionsSchema = z
  .object({
    /** Wait up to this long for the backend to exit (ms or '2s'); default 0: do not wait. */
    timeout: durationSchema.optional(),
  })
  .strict();

/** Options of {@link terminateBackend}. */
export type TerminateBackendOptions = z.input<typeof terminateOptionsSchema>;

/** Does this pid exist? Reads pg_stat_activity only (no heavyweight lock). */
const EXISTS_SQL = 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = $1) AS present';
/** Sends SIGINT: cancels the running statement; takes no lock. */
const CANCEL_SQL = 'SELECT pg_catalog.pg_cancel_backend($1) AS signalled';
/** Sends SIGTERM and optionally waits for the exit (ms); takes no lock. */
const TERMINATE_SQL = 'SELECT pg_catalog.pg_terminate_backend($1, $2::int8) AS signalled';

/**
 * Cancels the statement running in backend `pid` (`pg_cancel_backend`): the statement fails with
 * 57014 and its transaction rolls back. A session idle in transaction has no statement to cancel:
 * use {@link terminateBackend} for it.
 *
 * @example
 * const r = await cancelBackend(pool, 12345);
 * if (r.isErr() && r.error.kind === 'NotFound') console.log('already gone');
 */
export function cancelBackend(pool: Queryable, pid: number): ResultAsync<SignalResult, SignalError> {
  return signal(pool, pid, CANCEL_SQL, []);
}

/**
 * Terminates backend `pid` (`pg_terminate_backend`): the session ends and its open transaction rolls
 * back, releasing every lock it held. With `timeout` (ms or '2s'), waits for the process to exit and
 * reports `signalled: false` if it did not in time.
 *
 * @example
 * const r = await terminateBackend(pool, 12345, { timeout: '2s' });
 * if (r.isOk() && r.value.signalled) console.log('terminated');
 */
export function terminateBackend(
  pool: Queryable,
  pid: number,
  options: TerminateBackendOptions = {},
): ResultAsync<SignalResult, SignalError> {
  const parsed = terminateOptionsSchema.safeParse(options);
  if (!parsed.success) return invalid(parsed.error);
  const ms = parsed.data.timeout ?? 0;
  return signal(pool, pid, TERMINATE_SQL, [ms]);
}

function invalid(error: z.ZodError): ResultAsync<never, InvalidOptions> {
  return new ResultAsync(
    Promise.resolve(
      err(new InvalidOptions(error.issues.map((i) => ({ path: i.path, message: i.message, code: i.code })))),
    ),
  );
}

function signal(
  pool: Queryable,
  pid: number,
  sql: string,
  extra: readonly unknown[],
): ResultAsync<SignalResult, SignalError> {
  const parsed = pidSchema.safeParse(pid);
  if (!parsed.success) return invalid(parsed.error);
  return new ResultAsync(run(pool, parsed.data, sql, extra));
}

async function run(
  pool: Queryable,
  pid: number,
  sql: string,
  extra: readonly unknown[],
): Promise<Result<SignalResult, SignalError>> {
  try {
    const exists = await pool.query<{ present: boolean }>(EXISTS_SQL, [pid]);
    if (!exists.rows[0]?.present) return err(new NotFound('pg_stat_activity', [pid]));
    const result = await pool.query<{ signalled: boolean }>(sql, [pid, ...extra]);
    return ok({ pid, signalled: result.rows[0]?.signalled === true });
  } catch (error) {
    return err(classifyOrRethrow(error));
  }
}
