import { err, ok, type Result, ResultAsync } from 'neverthrow';
import pg from 'pg';
import { z } from 'zod/v4';
import {
  classifyOrRethrow,
  type DatabaseFailure,
  InvalidOptions,
  parseOptions,
  type RetriesExhausted,
  type TxKitError,
} from '../errors/index.js';
import { timeoutSchema } from '../tx/duration.js';
import { withRetry } from '../tx/retry.js';
import { isRetryable, type RetryableKind } from '../tx/retryable.js';
import { inspectDdl, unquoteIdentifier } from './ddl-statement.js';

/** One attempt of {@link safeDdl}. */
export interface DdlAttempt {
  /** 1-based. */
  readonly attempt: number;
  /** 'ok', or the error kind that ended it ('LockNotAvailable' when lock_timeout gave up). */
  readonly outcome: 'ok' | TxKitError['kind'];
  /** SQLSTATE of the failure, if any. */
  readonly code: string | undefined;
  /** Wall time of the attempt, ms. */
  readonly durationMs: number;
  /** Delay before the next attempt, ms (0 for the last one). */
  readonly delayMs: number;
  /** Invalid index dropped before this attempt (left by a failed CREATE INDEX CONCURRENTLY), if any. */
  readonly droppedInvalidIndex: string | null;
}

/** What a successful {@link safeDdl} did. */
export interface SafeDdlReport {
  /** Every attempt, oldest first; the last one succeeded. */
  readonly attempts: readonly DdlAttempt[];
  /** Whether it ran outside a transaction (`concurrently: true`). */
  readonly concurrently: boolean;
}

/** Errors of {@link safeDdl}. */
export type SafeDdlError = InvalidOptions | RetriesExhausted | DatabaseFailure;

const safeDdlOptionsSchema = z
  .object({
    /**
     * How long one attempt may wait for its lock before giving up (SET LOCAL lock_timeout). Short, so
     * a waiting ALTER never holds a queue of sessions behind it for long. Default 2 s; at least 1 ms.
     */
    lockTimeout: timeoutSchema.default(2000),
    /** statement_timeout of each attempt (the whole statement, lock wait included). Default: the session's. */
    statementTimeout: timeoutSchema.optional(),
    /** Total attempts. Default 5. */
    attempts: z.number().int().min(1).max(1000).default(5),
    /** Full-jitter exponential backoff between attempts, ms. Default { baseMs: 250, capMs: 5000 }. */
    backoff: z
      .object({
        baseMs: z.number().int().min(0).max(3_600_000),
        capMs: z.number().int().min(0).max(3_600_000),
      })
      .strict()
      .default({ baseMs: 250, capMs: 5000 }),
    /** Called after every attempt (awaited), before the backoff delay. */
    onAttempt: z
      .custom<(attempt: DdlAttempt) => void | Promise<void>>((v) => typeof v === 'function')
      .optional(),
    /**
     * Run outside a transaction block, for statements that refuse one (CREATE/DROP INDEX CONCURRENTLY,
     * REINDEX CONCURRENTLY, VACUUM …): session-level SET lock_timeout/statement_timeout on a dedicated
     * client, reset after. One statement only. Default false.
     */
    concurrently: z.boolean().default(false),
    /** Stops retrying when aborted (the running attempt finishes or times out first). */
    signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal).optional(),
  })
  .strict();

/** Options of {@link safeDdl}. */
export type SafeDdlOptions = z.input<typeof safeDdlOptionsSchema>;
type Parsed = z.output<typeof safeDdlOptionsSchema>;

/** Errors worth another attempt (judged by the one retry table): the lock was not free in time, or a deadlock picked us. */
const RETRY_ON: readonly RetryableKind[] = ['LockNotAvailable', 'DeadlockDetected'];

/**
 * Runs DDL so that it gives up instead of freezing a table: each attempt is one transaction with
 * `SET LOCAL lock_timeout` (2 s by default). While an `ALTER TABLE` waits for ACCESS EXCLUSIVE, every
 * later query on the table queues behind it (the lock-queue cascade); with a short
 * lock_timeout the attempt fails with 55P03 after at most that long, the queue drains, and the next
 * attempt comes after a jittered backoff. Every attempt is reported (`onAttempt`, and the result).
 *
 * Statements that cannot run in a transaction block (CREATE INDEX CONCURRENTLY …) are refused with
 * `InvalidOptions` unless `concurrently: true`, which runs them outside a transaction with session-level
 * timeouts on a dedicated client (reset after); a CREATE INDEX CONCURRENTLY must name its index, and an
 * INVALID index of that name left by a failed attempt is dropped (DROP INDEX CONCURRENTLY) before the
 * next one.
 *
 * @example
 * const r = await safeDdl(pool, 'ALTER TABLE orders ADD COLUMN delivery_notes text', {
 *   lockTimeout: '2s',
 *   attempts: 10,
 *   onAttempt: (a) => console.log(`attempt ${a.attempt}: ${a.outcome}`),
 * });
 * if (r.isErr() && r.error.kind === 'RetriesExhausted') console.log('the table stayed busy; try later');
 */
export function safeDdl(
  pool: pg.Pool,
  sql: string,
  options: SafeDdlOptions = {},
): ResultAsync<SafeDdlReport, SafeDdlError> {
  const parsed = parseOptions(safeDdlOptionsSchema, options);
  if (parsed.isErr()) return new ResultAsync(Promise.resolve(err(parsed.error)));
  const refusal = refuse(sql, parsed.value.concurrently);
  if (refusal) return new ResultAsync(Promise.resolve(err(refusal)));
  return new ResultAsync(retry(pool, sql, parsed.value));
}

function refuse(sql: string, concurrently: boolean): InvalidOptions | undefined {
  if (typeof sql !== 'string')
    return new InvalidOptions([{ path: ['sql'], message: 'sql must be a string' }]);
  const info = inspectDdl(sql);
  const issue = (message: string) => new InvalidOptions([{ path: ['sql'], message }]);
  if (info.statements === 0) return issue('no statement to run');
  if (info.transactionControl) {
    return issue(
      `${info.transactionControl} is not allowed: safeDdl runs each attempt in its own transaction`,
    );
  }
  if (!concurrently && info.nonTransactional) {
    return issue(
      `${info.nonTransactional} cannot run inside a transaction block; pass { concurrently: true } to run it ` +
        'outside one with session-level lock_timeout/statement_timeout',
    );
  }
  if (concurrently && info.statements > 1) {
    return issue(
      'with concurrently: true, give one statement per call (several would form an implicit transaction)',
    );
  }
  if (
    concurrently &&
    info.nonTransactional === 'CREATE INDEX CONCURRENTLY' &&
    info.concurrentIndexName === null
  ) {
    return issue(
      'name the index (CREATE INDEX CONCURRENTLY <name> ON …): a failed build leaves an INVALID index that ' +
        'must be dropped by name before the next attempt',
    );
  }
  return undefined;
}

/** Runs the attempts through the one retry engine (p-retry, full-jitter delays, the signal). */
async function retry(
  pool: pg.Pool,
  sql: string,
  options: Parsed,
): Promise<Result<SafeDdlReport, SafeDdlError>> {
  if (options.signal?.aborted) {
    return err(new InvalidOptions([{ path: ['signal'], message: 'aborted before the first attempt' }]));
  }
  const attempts: DdlAttempt[] = [];
  const info = inspectDdl(sql);
  /** The attempt just run, reported once its delay is known (onRetry), or with 0 when it was the last. */
  let pending: Omit<DdlAttempt, 'delayMs'> | undefined;
  const report = async (delayMs: number): Promise<void> => {
    if (pending === undefined) return;
    const record: DdlAttempt = { ...pending, delayMs };
    pending = undefined;
    attempts.push(record);
    await options.onAttempt?.(record);
  };
  const retried = await withRetry<Result<void, DatabaseFailure>>(
    async (attempt) => {
      const started = performance.now();
      const { result, dropped } = options.concurrently
        ? await runOutside(pool, sql, options, info.concurrentIndexName, info.concurrentIndexSchema)
        : await runInTransaction(pool, sql, options);
      const failure = result.isErr() ? result.error : undefined;
      const code = (failure as { code?: unknown } | undefined)?.code;
      pending = {
        attempt,
        outcome: failure?.kind ?? 'ok',
        code: typeof code === 'string' ? code : undefined,
        durationMs: Math.round(performance.now() - started),
        droppedInvalidIndex: dropped,
      };
      return failure !== undefined && isRetryable(failure, RETRY_ON)
        ? { done: false, failure }
        : { done: true, value: result };
    },
    {
      maxAttempts: options.attempts,
      backoff: options.backoff,
      signal: options.signal,
      onRetry: (_attempt, _failure, delayMs) => report(delayMs),
    },
  );
  await report(0);
  if (retried.isErr()) return err(retried.error);
  const result = retried.value;
  if (result.isErr()) return err(result.error);
  return ok({ attempts, concurrently: options.concurrently });
}

/** What one attempt did: its result, and the invalid index it dropped first (if any). */
interface AttemptOutcome {
  readonly result: Result<void, DatabaseFailure>;
  readonly dropped: string | null;
}

/** Swallows a checked-out client's 'error' event (pg-pool listens only to idle clients): the failure
 * reaches us through the running query's rejection instead of crashing the process. */
function ignoreClientError(): void {}

async function checkout(pool: pg.Pool): Promise<pg.PoolClient> {
  const client = await pool.connect();
  client.on('error', ignoreClientError);
  return client;
}

/** Back to the pool, or destroyed when `error` says the connection is unusable. */
function release(client: pg.PoolClient, error?: unknown): void {
  client.off('error', ignoreClientError);
  if (error === undefined) client.release();
  else client.release(error instanceof Error ? error : new Error(String(error)));
}

/**
 * One attempt in a transaction. `BEGIN; SET LOCAL lock_timeout …; SET LOCAL statement_timeout …` go in
 * one round trip (validated integers, not strings); the DDL takes whatever lock it needs (ACCESS
 * EXCLUSIVE for most ALTER TABLE forms) and gives up after lock_timeout with 55P03.
 */
async function runInTransaction(pool: pg.Pool, sql: string, options: Parsed): Promise<AttemptOutcome> {
  let client: pg.PoolClient;
  try {
    client = await checkout(pool);
  } catch (error) {
    return { result: err(classifyOrRethrow(error)), dropped: null };
  }
  const statement =
    options.statementTimeout === undefined
      ? ''
      : ` SET LOCAL statement_timeout = ${options.statementTimeout};`;
  try {
    // BEGIN + timeouts: no lock yet; SET LOCAL ends with the transaction.
    await client.query(`BEGIN; SET LOCAL lock_timeout = ${options.lockTimeout};${statement}`);
    // The caller's DDL: takes its own lock (usually ACCESS EXCLUSIVE) within lock_timeout, or fails.
    await client.query(sql);
    // Releases the DDL's locks.
    await client.query('COMMIT');
    release(client);
    return { result: ok(undefined), dropped: null };
  } catch (error) {
    const failure = classifyOrRethrow(error);
    try {
      // Ends the failed transaction and releases whatever it had locked.
      await client.query('ROLLBACK');
      release(client);
    } catch (rollbackError) {
      release(client, rollbackError);
    }
    return { result: err(failure), dropped: null };
  }
}

/**
 * One attempt outside a transaction block on a dedicated client: session-level `SET lock_timeout` /
 * `SET statement_timeout` (validated integers), the statement, then `RESET` before the client goes back
 * to the pool (destroyed instead if the reset fails). For a named CREATE INDEX CONCURRENTLY, an INVALID
 * index of that name (left by a failed build) is dropped first with DROP INDEX CONCURRENTLY, which takes
 * SHARE UPDATE EXCLUSIVE on the table (writers keep going) under the same lock_timeout.
 */
async function runOutside(
  pool: pg.Pool,
  sql: string,
  options: Parsed,
  indexName: string | null,
  indexSchema: string | null,
): Promise<AttemptOutcome> {
  let client: pg.PoolClient;
  try {
    client = await checkout(pool);
  } catch (error) {
    return { result: err(classifyOrRethrow(error)), dropped: null };
  }
  let dropped: string | null = null;
  let result: Result<void, DatabaseFailure>;
  let previous: { lock_timeout: string; statement_timeout: string } | undefined;
  try {
    // Session-level timeouts (no transaction block to scope them). The session's own values are read
    // first and put back after: RESET would fall back to the server default, dropping settings the
    // application gave this pooled connection. Reads settings only, no lock.
    const read = await client.query<{ lock_timeout: string; statement_timeout: string }>(
      "SELECT current_setting('lock_timeout') AS lock_timeout, current_setting('statement_timeout') AS statement_timeout",
    );
    previous = read.rows[0];
    // set_config(…, is_local => false): session level, values as parameters; no lock.
    await client.query('SELECT set_config($1, $2, false), set_config($3, $4, false)', [
      'lock_timeout',
      String(options.lockTimeout),
      'statement_timeout',
      options.statementTimeout === undefined
        ? (previous?.statement_timeout ?? '0')
        : String(options.statementTimeout),
    ]);
    if (indexName !== null) dropped = await dropInvalidIndex(client, indexName, indexSchema);
    // The caller's statement, in autocommit: takes its own locks (SHARE UPDATE EXCLUSIVE for CIC).
    await client.query(sql);
    result = ok(undefined);
  } catch (error) {
    result = err(classifyOrRethrow(error));
  }
  if (previous === undefined) {
    // The settings were never read: nothing of ours was set, but the connection may be the failure.
    release(client, result.isErr() ? result.error : undefined);
    return { result, dropped };
  }
  try {
    // Back to the session's own values before the client returns to the pool; no lock.
    await client.query('SELECT set_config($1, $2, false), set_config($3, $4, false)', [
      'lock_timeout',
      previous.lock_timeout,
      'statement_timeout',
      previous.statement_timeout,
    ]);
    release(client);
  } catch (resetError) {
    release(client, resetError);
  }
  return { result, dropped };
}

/**
 * Finds an INVALID index with this name (in the table's schema when the statement qualified the table,
 * else through search_path) and drops it. Returns the dropped index's qualified name, or null.
 */
async function dropInvalidIndex(
  client: pg.PoolClient,
  name: string,
  schema: string | null,
): Promise<string | null> {
  const target =
    schema === null
      ? pg.escapeIdentifier(unquoteIdentifier(name))
      : `${pg.escapeIdentifier(unquoteIdentifier(schema))}.${pg.escapeIdentifier(unquoteIdentifier(name))}`;
  // Catalog read only (AccessShareLock on pg_index/pg_class/pg_namespace): is there an invalid index?
  const found = await client.query<{ nspname: string; relname: string }>(
    `SELECT n.nspname, c.relname
       FROM pg_catalog.pg_index i
       JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE i.indexrelid = pg_catalog.to_regclass($1) AND NOT i.indisvalid`,
    [target],
  );
  const row = found.rows[0];
  if (!row) return null;
  const qualified = `${pg.escapeIdentifier(row.nspname)}.${pg.escapeIdentifier(row.relname)}`;
  // SHARE UPDATE EXCLUSIVE on the table (reads and writes continue), under the session's lock_timeout.
  await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${qualified}`);
  return qualified;
}
