import { err, ok, type Result, ResultAsync } from 'neverthrow';
import pg from 'pg';
import { z } from 'zod/v4';
import { connectionConfigOf } from '../capabilities/connection-config-of.js';
import { backendPid, detectTransactionPooler } from '../capabilities/detect-transaction-pooler.js';
import {
  ConnectionLost,
  classify,
  classifyOrRethrow,
  type DatabaseFailure,
  type InvalidOptions,
  LeaseLost,
  LockBusy,
  LockNotAvailable,
  TxKitError,
} from '../errors/index.js';
import { traceLockWait } from '../observability/lock-telemetry.js';
import { LogSink } from '../observability/log-sink.js';
import { loggerSchema } from '../observability/logger.js';
import { resolveOpenTelemetry, telemetrySchema } from '../observability/otel-api.js';
import { durationSchema, MAX_DURATION_MS, timeoutSchema } from '../tx/duration.js';
import { type AnyAdvisoryKey, formatAdvisoryKey, isAdvisoryKey, lockTagOf } from './advisory-key.js';
import { invalid, parseOptions } from './parse-options.js';

/**
 * The connection goes through a transaction-mode (or statement-mode) pooler such as PgBouncer with
 * `pool_mode = transaction` (or a provider's `-pooler` endpoint): consecutive statements may run on
 * different server sessions, so a session lock would be taken on one backend, stay there when the
 * pooler hands that backend to someone else, and the unlock would go elsewhere. Use
 * `withAdvisoryLock` (transaction scope) through such a pooler, or connect directly. The queue worker
 * reports it too (phase `'listen'`): a LISTEN there would never hear a notification, so it polls.
 */
export class TransactionPoolerDetected extends TxKitError {
  /** The failure kind, `'TransactionPoolerDetected'`. */
  readonly kind = 'TransactionPoolerDetected' as const;
  /** How it was found: declared in the options, or what the probe saw (backend pids, a lost NOTIFY). */
  readonly evidence: string;
  /** `feature`: what cannot work there, for the message (`'session locks'` unless said). */
  constructor(evidence: string, feature = 'session locks') {
    super(`${feature} cannot work through a transaction-mode pooler (${evidence})`);
    this.evidence = evidence;
  }
}

/** Why a held {@link SessionLock} was lost. */
export type SessionLockLostReason =
  | 'connection-error' // the socket failed or the server ended the session (pg_terminate_backend, restart)
  | 'check-timeout' // the liveness check got no answer in time (stalled / black-holed connection)
  | 'lock-gone' // the session is alive but pg_locks no longer shows our lock
  | 'pid-changed' // a different backend answered: a pooler is multiplexing the connection
  | 'check-failed'; // the liveness check failed with a database error

const sessionLockOptionsSchema = z
  .object({
    /**
     * 'try' (default): one `pg_try_advisory_lock`; busy → `LockBusy` (come back later: leader election).
     * 'block': `pg_advisory_lock`, waiting until the holder goes away, bounded by `lockTimeout` and `signal`.
     */
    wait: z.enum(['block', 'try']).default('try'),
    /** Longest wait with `wait: 'block'` → `LockNotAvailable`. Default: no limit. */
    lockTimeout: timeoutSchema.optional(),
    /** Interval between liveness checks. Default 5 s (minimum 20 ms). */
    checkEvery: durationSchema
      .default(5000)
      .refine((ms) => ms >= 20, { message: 'checkEvery must be ≥ 20 ms' }),
    /** A check without an answer after this long means the connection is stalled → lost. Default: checkEvery (≥ 1 s). */
    checkTimeout: durationSchema
      .refine((ms) => ms > 0, { message: 'checkTimeout must be positive' })
      .optional(),
    /**
     * Server-side bound on an orphaned lock: `idle_session_timeout` of the lock's session. If this process
     * stops checking (frozen, partitioned, black-holed) the server ends the session — and releases the
     * lock — after this long. Default: 3 × checkEvery + checkTimeout (at least 10 s). At least 1 s and
     * longer than `checkEvery` (the session is idle between two checks: a shorter bound would end a
     * healthy session). `false` disables it; 0 is refused, as every timeout of 0 in this library.
     */
    serverIdleTimeout: z.union([z.literal(false), timeoutSchema]).optional(),
    /**
     * How the connection reaches PostgreSQL. 'detect' (default): probe for a transaction-mode pooler (a
     * second connection and a repeated `pg_backend_pid()`); 'direct': declared direct or session-mode
     * pooler, no probe; 'transaction': declared transaction-mode pooler → refused at once.
     */
    pooler: z.enum(['detect', 'direct', 'transaction']).default('detect'),
    /** `application_name` of the dedicated connection (visible in pg_stat_activity and lock reports). */
    applicationName: z
      .string()
      .min(1)
      .max(63)
      // A NUL would end the value early in the startup packet (the protocol's strings are NUL-terminated).
      .refine((s) => !s.includes('\u0000'), 'must not contain NUL (U+0000)')
      .default('pg-txkit:session-lock'),
    /** Called once, with the error, when the lock is lost. `lost` is aborted at the same time. */
    onLost: z.custom<(error: LeaseLost) => void>((v) => typeof v === 'function').optional(),
    /** Aborts the acquisition (a blocking wait included). */
    signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal).optional(),
    /** Longest wait to open the dedicated connection. Default 10 s. */
    connectTimeout: durationSchema.default(10_000),
    /** A pino-compatible logger: a lost lock (warn). Without one: one console.error line, rate-limited. */
    logger: loggerSchema.optional(),
    /** OpenTelemetry: the `@opentelemetry/api` module, `false` for none; by default the installed one. */
    telemetry: telemetrySchema.optional(),
  })
  .strict()
  .superRefine((o, ctx) => {
    const idle = o.serverIdleTimeout;
    if (typeof idle === 'number' && (idle < 1000 || idle <= o.checkEvery)) {
      ctx.addIssue({
        code: 'custom',
        path: ['serverIdleTimeout'],
        message: `serverIdleTimeout must be at least 1 s and longer than checkEvery (${o.checkEvery} ms): the session is idle between checks (false disables it)`,
      });
    }
  });

/** Options of {@link SessionLock.acquire}. */
export type SessionLockOptions = z.input<typeof sessionLockOptionsSchema>;

/** What {@link SessionLock.acquire} can fail with. */
export type SessionLockError =
  | InvalidOptions
  | LockBusy
  | LockNotAvailable
  | TransactionPoolerDetected
  | ConnectionLost
  | DatabaseFailure;

/** Where the dedicated connection goes: a pool (its connection options are reused), a config, or a URL. */
export type SessionLockTarget = pg.Pool | pg.ClientConfig | string;

/** What {@link SessionLock.release} did. */
export interface SessionLockReleased {
  /** True when `pg_advisory_unlock` ran on the holding session and returned true. */
  readonly unlocked: boolean;
}

// No lock: makes the server end this session (and so drop its lock) if we go quiet — the server-side
// bound on an orphaned lock (a backend that never noticed its client was gone, after a serverless proxy cut the TCP connection). Only
// settings this server knows are set (idle_session_timeout is PostgreSQL 14+).
const SESSION_SETTINGS_SQL = `SELECT set_config(s.name, s.value, false)
  FROM unnest($1::text[], $2::text[]) AS s(name, value)
 WHERE EXISTS (SELECT 1 FROM pg_settings p WHERE p.name = s.name)`;

// No lock: session-level lock_timeout for a blocking acquisition (reset right after).
const SET_LOCK_TIMEOUT_SQL = `SELECT set_config('lock_timeout', $1, false)`;

// Session-level advisory locks (ExclusiveLock on the tag, held until unlock or the session ends —
// NOT released by COMMIT/ROLLBACK). Only ever run on the one dedicated client that also unlocks.
const LOCK_SQL = {
  try1: 'SELECT pg_try_advisory_lock($1::bigint) AS acquired',
  try2: 'SELECT pg_try_advisory_lock($1::int4, $2::int4) AS acquired',
  block1: 'SELECT pg_advisory_lock($1::bigint) IS NULL AS acquired',
  block2: 'SELECT pg_advisory_lock($1::int4, $2::int4) IS NULL AS acquired',
  unlock1: 'SELECT pg_advisory_unlock($1::bigint) AS unlocked',
  unlock2: 'SELECT pg_advisory_unlock($1::int4, $2::int4) AS unlocked',
} as const;

// No lock: liveness check. Reads the lock manager's view (pg_locks) to confirm that THIS backend still
// holds the advisory lock (granted), and returns the backend pid so a pooler switch is noticed.
const CHECK_SQL = `SELECT pg_backend_pid() AS pid, EXISTS (
    SELECT 1 FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.pid = pg_backend_pid()
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.classid = $1::oid AND l.objid = $2::oid AND l.objsubid = $3::int2
  ) AS held`;

type Parsed = z.output<typeof sessionLockOptionsSchema>;

/** A lock just taken, before it is wrapped in a {@link SessionLock}. */
interface HeldLock {
  readonly client: pg.Client;
  readonly key: AnyAdvisoryKey;
  readonly pid: number;
  readonly options: Parsed;
}

/**
 * A session-scoped advisory lock for long-lived leaders (a scheduler, a singleton consumer) — and only
 * for them: everything that fits in a transaction should use {@link withAdvisoryLock}.
 *
 * What it does about the classic session-lock incidents on pooled and serverless Postgres:
 * - Its own dedicated `pg.Client` (a new connection made from the pool's options, never a pool slot):
 *   lock and unlock always run on that same session, no other query can borrow it, and the pool's
 *   capacity is untouched. A session lock through `pool.query` leaks: lock and unlock land on different pooled clients.
 * - Liveness check every `checkEvery`: `pg_backend_pid()` unchanged AND `pg_locks` still shows our lock,
 *   with a client-side timeout (`checkTimeout`) so a black-holed TCP connection is noticed. On failure,
 *   on a socket error or on the server ending the session, the connection is destroyed, `lost`
 *   (an AbortSignal) is aborted with a `LeaseLost`, and `onLost` is called: stop leading at once.
 * - `idle_session_timeout` (+ TCP keepalive/user-timeout settings) on its session: if this process goes
 *   quiet, the server ends the session and frees the lock after `serverIdleTimeout` instead of keeping
 *   an orphan for hours (what happens when a provider's proxy cuts the TCP connection while the lock is held).
 * - Refuses transaction-mode poolers (`TransactionPoolerDetected`), detected by a probe or declared.
 *
 * Limits: a lock proves the connection was alive at the last check, not that this process is the only
 * one acting right now — between a network cut and the next check a new leader may start. Make the
 * leader's writes idempotent or fenced (`singleRun`, unique constraints, queue lease tokens).
 *
 * @example
 * const lock = await SessionLock.acquire(pool, advisoryKey('scheduler', 'leader'), { checkEvery: '2s' });
 * if (lock.isOk()) {
 *   try {
 *     await runScheduler({ signal: lock.value.lost }); // stops when the lock is lost
 *   } finally {
 *     await lock.value.release();
 *   }
 * }
 */
export class SessionLock {
  /** The key held. */
  readonly key: AnyAdvisoryKey;
  /** Backend pid of the session holding the lock. */
  readonly pid: number;
  /** Aborted (reason: `LeaseLost`) when the lock is lost. Not aborted by `release()`. */
  readonly lost: AbortSignal;
  readonly #client: pg.Client;
  readonly #options: Parsed;
  readonly #controller = new AbortController();
  readonly #log: LogSink;
  #timer: NodeJS.Timeout | undefined;
  #released: Promise<SessionLockReleased> | undefined;
  #lostReason: SessionLockLostReason | undefined;

  private constructor(client: pg.Client, key: AnyAdvisoryKey, pid: number, options: Parsed) {
    this.#client = client;
    this.key = key;
    this.pid = pid;
    this.#options = options;
    this.#log = new LogSink(options.logger, 'pg-txkit session lock');
    this.lost = this.#controller.signal;
    client.removeAllListeners('error'); // the no-op listener kept the process safe until now
    client.on('error', (error) => this.#markLost('connection-error', error));
    client.on('end', () => this.#markLost('connection-error', new Error('the connection was closed')));
    this.#schedule();
  }

  /**
   * Opens a dedicated connection and takes the session lock on it. See the class doc.
   *
   * Errors (values): `InvalidOptions` (nothing sent), `LockBusy` (try: someone else holds it),
   * `LockNotAvailable` (block: `lockTimeout` passed or `signal` aborted), `TransactionPoolerDetected`,
   * `ConnectionLost` / other database failures while connecting or locking.
   *
   * @example
   * const lock = await SessionLock.acquire('postgres://…', 42n, { wait: 'block', lockTimeout: '30s' });
   */
  static acquire(
    target: SessionLockTarget,
    key: AnyAdvisoryKey,
    options: SessionLockOptions = {},
  ): ResultAsync<SessionLock, SessionLockError> {
    const keys = isAdvisoryKey(key) ? [formatAdvisoryKey(key)] : [];
    const wait = options.wait ?? 'try';
    const connection = connectionConfigOf(target);
    const traced = traceLockWait(
      resolveOpenTelemetry(options.telemetry),
      { scope: 'session', wait, keys, connection },
      () => acquire(target, key, options),
    );
    return new ResultAsync(traced).map(
      (held) => new SessionLock(held.client, held.key, held.pid, held.options),
    );
  }

  /** True while the lock is held (not lost, not released). */
  get held(): boolean {
    return this.#released === undefined && !this.#controller.signal.aborted;
  }

  /** Why the lock was lost, once it was. */
  get lostReason(): SessionLockLostReason | undefined {
    return this.#lostReason;
  }

  /**
   * Unlocks on the same session and closes the dedicated connection. Idempotent (every call returns
   * the same promise) and never rejects: if the connection is already dead, the server has released
   * (or will release) the lock with the session, and `unlocked` is false.
   *
   * @example
   * const { unlocked } = await lock.release();
   */
  release(): Promise<SessionLockReleased> {
    this.#released ??= this.#release();
    return this.#released;
  }

  async #release(): Promise<SessionLockReleased> {
    clearTimeout(this.#timer);
    if (this.#controller.signal.aborted) return { unlocked: false };
    let unlocked = false;
    try {
      const { sql, values } = lockStatement(this.key, 'unlock');
      const result = await withTimeout(
        this.#client.query<{ unlocked: boolean }>(sql, values),
        checkTimeoutOf(this.#options),
      );
      unlocked = result !== TIMEOUT && result.rows[0]?.unlocked === true;
    } catch {
      unlocked = false;
    }
    await closeClient(this.#client);
    return { unlocked };
  }

  #schedule(): void {
    if (!this.held) return;
    this.#timer = setTimeout(() => void this.#check(), this.#options.checkEvery);
    this.#timer.unref();
  }

  async #check(): Promise<void> {
    if (!this.held) return;
    const tag = lockTagOf(this.key);
    try {
      const result = await withTimeout(
        this.#client.query<{ pid: number; held: boolean }>(CHECK_SQL, [
          String(tag.classid),
          String(tag.objid),
          tag.objsubid,
        ]),
        checkTimeoutOf(this.#options),
      );
      if (!this.held) return;
      if (result === TIMEOUT) {
        this.#markLost(
          'check-timeout',
          new Error(`no answer to the liveness check in ${checkTimeoutOf(this.#options)} ms`),
        );
        return;
      }
      const row = result.rows[0];
      if (row?.pid !== this.pid) {
        this.#markLost(
          'pid-changed',
          new Error(`backend pid changed from ${this.pid} to ${String(row?.pid)}`),
        );
        return;
      }
      if (!row.held) {
        this.#markLost('lock-gone', new Error('pg_locks no longer shows the lock on this session'));
        return;
      }
    } catch (error) {
      if (!this.held) return;
      const failure = classify(error);
      this.#markLost(failure?.kind === 'ConnectionLost' ? 'connection-error' : 'check-failed', error);
      return;
    }
    this.#schedule();
  }

  #markLost(reason: SessionLockLostReason, cause: unknown): void {
    if (!this.held) return;
    clearTimeout(this.#timer);
    this.#lostReason = reason;
    const error = new LeaseLost(formatAdvisoryKey(this.key), cause);
    this.#log.warn(
      'lost',
      { err: cause, key: formatAdvisoryKey(this.key), reason, pid: this.pid },
      `session lock ${formatAdvisoryKey(this.key)} lost (${reason}): stop acting as its holder`,
    );
    void closeClient(this.#client);
    this.#controller.abort(error);
    const onLost = this.#options.onLost;
    // Run outside our call stack: an exception thrown by the callback surfaces as the defect it is.
    if (onLost) queueMicrotask(() => onLost(error));
  }
}

const TIMEOUT: unique symbol = Symbol('timeout');

function checkTimeoutOf(options: Parsed): number {
  return options.checkTimeout ?? Math.max(1000, options.checkEvery);
}

async function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMEOUT> {
  let timer: NodeJS.Timeout | undefined;
  promise.catch(() => {}); // a late rejection after the timeout is expected (we destroy the socket)
  try {
    return await Promise.race([
      promise,
      new Promise<typeof TIMEOUT>((resolve) => {
        timer = setTimeout(() => resolve(TIMEOUT), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Closes a client; a query still in flight (a stalled one) makes pg destroy the socket at once. */
async function closeClient(client: pg.Client): Promise<void> {
  await withTimeout(
    client.end().catch(() => {}),
    1000,
  );
}

function lockStatement(
  key: AnyAdvisoryKey,
  op: 'try' | 'block' | 'unlock',
): { sql: string; values: unknown[] } {
  if (typeof key === 'bigint') return { sql: LOCK_SQL[`${op}1`], values: [key.toString()] };
  return { sql: LOCK_SQL[`${op}2`], values: [key.namespace, key.id] };
}

function clientConfigOf(target: SessionLockTarget, options: Parsed): pg.ClientConfig {
  return {
    ...connectionConfigOf(target),
    application_name: options.applicationName,
    connectionTimeoutMillis: options.connectTimeout,
    keepAlive: true,
    keepAliveInitialDelayMillis: Math.min(10_000, options.checkEvery),
  };
}

async function connect(config: pg.ClientConfig): Promise<pg.Client> {
  const client = new pg.Client(config);
  client.on('error', () => {}); // replaced by the SessionLock's own handler once held
  try {
    await client.connect();
  } catch (error) {
    // pg rejects a connect slower than `connectionTimeoutMillis` with a plain Error('timeout expired'),
    // which classify() does not recognise: it is a connection failure, not a defect (acquire() used to
    // reject with it; found by test/property/fuzz-advisory with connectTimeout: 1).
    if (classify(error) === undefined && error instanceof Error && /timeout/i.test(error.message)) {
      throw new ConnectionLost(undefined, error);
    }
    throw error;
  }
  return client;
}

function failure(error: unknown): SessionLockError {
  return classifyOrRethrow(error);
}

async function acquire(
  target: SessionLockTarget,
  key: AnyAdvisoryKey,
  input: SessionLockOptions,
): Promise<Result<HeldLock, SessionLockError>> {
  const parsed = parseOptions(sessionLockOptionsSchema, input);
  if (parsed.isErr()) return err(parsed.error);
  const options = parsed.value;
  if (!isAdvisoryKey(key)) {
    return err(
      invalid(['key'], 'not an advisory key: use advisoryKey() (bigint) or advisoryKeyPair() (two int32)'),
    );
  }
  if (options.pooler === 'transaction') {
    return err(new TransactionPoolerDetected("declared with pooler: 'transaction'"));
  }
  if (options.signal?.aborted) return err(new LockNotAvailable(options.signal.reason));
  const config = clientConfigOf(target, options);
  let client: pg.Client;
  try {
    client = await connect(config);
  } catch (error) {
    return err(failure(error));
  }
  const onAbort = (): void => void closeClient(client);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let held = false;
  try {
    let pid: number;
    if (options.pooler === 'detect') {
      const detected = await detectTransactionPooler(client, () => connect(config), closeClient);
      if (detected.evidence) return err(new TransactionPoolerDetected(detected.evidence));
      pid = detected.pid;
    } else {
      pid = await backendPid(client);
    }
    const checkTimeout = checkTimeoutOf(options);
    // Capped at the largest value the settings accept (int32 ms): with checkEvery near that bound the
    // sum overflowed and SET failed with 22023 (found by test/property/fuzz-advisory).
    const serverIdle =
      options.serverIdleTimeout === false
        ? 0
        : (options.serverIdleTimeout ??
          Math.min(MAX_DURATION_MS, Math.max(10_000, 3 * options.checkEvery + checkTimeout)));
    const names = [
      'tcp_keepalives_idle',
      'tcp_keepalives_interval',
      'tcp_keepalives_count',
      'tcp_user_timeout',
    ];
    const values = ['10', '5', '3', String(Math.min(MAX_DURATION_MS, Math.max(1000, 2 * checkTimeout)))];
    if (serverIdle > 0) {
      names.push('idle_session_timeout');
      values.push(String(serverIdle));
    }
    await client.query(SESSION_SETTINGS_SQL, [names, values]);
    if (options.wait === 'try') {
      const { sql, values: v } = lockStatement(key, 'try');
      const { rows } = await client.query<{ acquired: boolean }>(sql, v);
      if (rows[0]?.acquired !== true) return err(new LockBusy([formatAdvisoryKey(key)]));
    } else {
      if (options.lockTimeout !== undefined) {
        await client.query(SET_LOCK_TIMEOUT_SQL, [`${options.lockTimeout}ms`]);
      }
      const { sql, values: v } = lockStatement(key, 'block');
      await client.query(sql, v);
      // No lock: back to the connection's default lock_timeout for the rest of the session.
      if (options.lockTimeout !== undefined) await client.query('RESET lock_timeout');
    }
    held = true;
    return ok({ client, key, pid, options });
  } catch (error) {
    if (options.signal?.aborted) return err(new LockNotAvailable(options.signal.reason));
    return err(failure(error));
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
    if (!held) await closeClient(client);
  }
}
