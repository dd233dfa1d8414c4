import { AsyncLocalStorage } from 'node:async_hooks';
import { type Err, err, type Ok, ok, type Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import {
  ConnectionLost,
  type DatabaseFailure,
  InvalidOptions,
  NotInTransaction,
  type TxError,
  TxKitError,
} from '../errors/index.js';
import { type OpenTelemetryApi, resolveOpenTelemetry } from '../observability/otel-api.js';
import { type TxCall, type TxMetrics, TxTelemetry } from '../observability/tx-telemetry.js';
import { acquireClient, freeClients } from './acquire-client.js';
import { beginSql, beginStatements } from './begin-sql.js';
import { guardClientErrors } from './guard-client-errors.js';
import { HookRunner } from './hooks.js';
import { isPool } from './is-pool.js';
import { isResult } from './is-result.js';
import { planScope } from './propagation.js';
import { ReplicaRouter } from './replica-router.js';
import { withRetry } from './retry.js';
import { isRetryable } from './retryable.js';
import { TransactionStatuses } from './transaction-status.js';
import { type AttemptContext, type AttemptEnd, TxAttempt } from './tx-attempt.js';
import { TxHandle } from './tx-handle.js';
import {
  type ConstraintErrors,
  type ConstraintMap,
  type ConstraintViolation,
  type TxManagerOptions,
  txManagerOptionsSchema,
} from './tx-manager-options.js';
import { parseTxOptions, type TxOptions, type TxSettings, toOptionIssues } from './tx-options.js';
import { TxUsageError } from './tx-usage-error.js';
import type { AfterCommit, AfterRollback, Queryable, Tx } from './types.js';

/**
 * The success type of a callback's return: `T` for a plain `T`, the `Ok` type of a `Result`, and
 * nothing for an `Err` branch (an early `return r` of an `Err` never commits, so its success type
 * cannot be what `do()` resolves with).
 */
export type OkOf<R> = R extends Err<unknown, unknown> ? never : R extends Ok<infer T, unknown> ? T : R;
/** The error type of a callback's return: the `Err` type of a `Result`, `never` for a plain value. */
export type ErrOf<R> = R extends Ok<unknown, infer E> ? E : R extends Err<unknown, infer E> ? E : never;

/** A transaction callback: gets the {@link Tx}, returns a value, a `Result`, or a promise of either. */
export type TxCallback<R> = (tx: Tx) => R;

/** Isolation levels from weakest to strongest. */
const ISOLATION_RANK: Readonly<Record<TxSettings['isolation'], number>> = {
  'read committed': 0,
  'repeatable read': 1,
  serializable: 2,
};

/**
 * Error kinds a callback may RETURN (as `err(...)`) that still count as a retryable failure: they mean
 * the attempt is lost whatever the callback decides. `LockNotAvailable` is not among them: a returned
 * NOWAIT / lock_timeout refusal is usually a deliberate answer (`lockRows({ wait: 'nowait' })`).
 */
const RETURNED_CONFLICTS: ReadonlySet<string> = new Set([
  'SerializationFailure',
  'DeadlockDetected',
  'ConnectionLost',
]);

/**
 * Is this failure of an outermost attempt retried under these settings? The retry table decides, except
 * that a read-only refusal (25006) of a `readOnly` transaction is its own write, not a read-only server:
 * another attempt would be refused the same way.
 */
function retriesFailure(failure: TxKitError, settings: TxSettings): boolean {
  if (settings.readOnly && failure.kind === 'ReadOnlyTransaction') return false;
  return isRetryable(failure, settings.retryOn);
}

/** Distinct per-call option sets whose parsed settings a manager keeps. */
const SETTINGS_CACHE_SIZE = 256;

/**
 * A key for options made only of primitive values (the usual `{ isolation, lockTimeout, name }`), or
 * undefined when they hold anything else (a signal, a backoff object, a getter that throws): those are
 * parsed on every call.
 */
function primitiveKey(options: unknown): string | undefined {
  if (
    typeof options !== 'object' ||
    options === null ||
    Object.getPrototypeOf(options) !== Object.prototype
  ) {
    return undefined;
  }
  try {
    let key = '';
    for (const name of Object.keys(options)) {
      const value = (options as Record<string, unknown>)[name];
      const type = typeof value;
      if (type === 'undefined') continue;
      if (type !== 'string' && type !== 'number' && type !== 'boolean') return undefined;
      key += `${name}\u0000${type}:${String(value)}\u0001`;
    }
    return key;
  } catch {
    return undefined;
  }
}

/**
 * The own enumerable keys and values of options already known to hold primitive values only
 * ({@link primitiveKey} said so), flattened: key, value, key, value…; undefined when reading them throws.
 */
function valuesOf(options: object): unknown[] | undefined {
  try {
    const values: unknown[] = [];
    for (const name of Object.keys(options)) values.push(name, (options as Record<string, unknown>)[name]);
    return values;
  } catch {
    return undefined;
  }
}

/** Does `options` still hold exactly these keys and values (see {@link valuesOf})? */
function sameValues(options: object, values: readonly unknown[]): boolean {
  try {
    const names = Object.keys(options);
    if (names.length * 2 !== values.length) return false;
    for (let i = 0; i < names.length; i++) {
      const name = names[i] as string;
      if (values[2 * i] !== name || values[2 * i + 1] !== (options as Record<string, unknown>)[name])
        return false;
    }
    return true;
  } catch {
    return false;
  }
}

/** How an outermost transaction ended, for its span and counters. */
type TxOutcome = { readonly committed: true } | { readonly committed: false; readonly error: unknown };

/** Wait for a second client in `requiresNew` inside a transaction, when no `acquireTimeout` is given. */
const REQUIRES_NEW_ACQUIRE_MS = 2000;

/** What one run of a callback in a scope produced. */
type ScopeOutcome =
  | { readonly type: 'value'; readonly value: unknown }
  | { readonly type: 'err'; readonly error: unknown }
  | { readonly type: 'failure'; readonly failure: DatabaseFailure }
  | { readonly type: 'defect'; readonly error: unknown };

/**
 * Runs callbacks in PostgreSQL transactions: one pinned client per transaction, BEGIN and every
 * `SET LOCAL` in one round trip, retries of the whole callback on 40001 / 40P01 / 55P03 / a connection
 * lost before COMMIT (full-jitter backoff, deadline, abort signal), typed errors as values,
 * propagation through AsyncLocalStorage (`required`, `nested`, `requiresNew`, `mandatory`), and
 * `afterCommit` callbacks that run once, after the outermost COMMIT.
 *
 * With `strict: true` the manager replaces `query` and `connect` ON THIS POOL INSTANCE (own
 * properties that shadow pg.Pool's methods) with versions that throw {@link TxUsageError} while a
 * transaction of this manager is active in the calling async context — the bug of running a query
 * "inside" a transaction on another pooled connection.
 *
 * @example
 * const tm = new TxManager(pool, { defaults: { lockTimeout: '2s' } });
 * const result = await tm.do(
 *   async (tx) => {
 *     const { rows } = await tx.query('SELECT count(*)::int AS n FROM doctors WHERE on_call');
 *     if (rows[0].n < 2) return err(new ConditionFailed());
 *     await tx.query('UPDATE doctors SET on_call = false WHERE id = $1', [id]);
 *     return ok(rows[0].n - 1);
 *   },
 *   { isolation: 'serializable', name: 'leave-shift' },
 * );
 * if (result.isErr()) console.log(result.error.kind); // 'ConditionFailed' | 'RetriesExhausted' | …
 */
export class TxManager<C extends Record<string, unknown> = Record<never, never>> {
  /** The pool transactions check clients out of (`tm.db()` outside a transaction). */
  readonly pool: pg.Pool;
  /** Whether direct pool use inside a transaction throws. */
  readonly strict: boolean;
  /** The read replica's pool `readOnly` transactions go to (the `replica` option), if any. */
  readonly replica: pg.Pool | undefined;
  /** Routes `readOnly` transactions to the replica, with read-your-writes (when `replica` is given). */
  readonly #router: ReplicaRouter | undefined;
  /**
   * The OpenTelemetry API this manager reports to (the `telemetry` option, else the installed
   * `@opentelemetry/api`), or undefined: none. Patterns running on the manager (`withAdvisoryLock`)
   * put their spans there too.
   */
  readonly telemetry: OpenTelemetryApi | undefined;
  readonly #als = new AsyncLocalStorage<TxHandle>();
  readonly #connect: () => Promise<pg.PoolClient>;
  readonly #defaults: TxOptions;
  /** `#defaults` parsed, when they hold no per-call state (no signal): reused by calls without options. */
  readonly #defaultSettingsOk: Ok<TxSettings, never> | undefined;
  readonly #hooks: HookRunner;
  /** Counters, and spans/metrics when OpenTelemetry is present. */
  readonly #telemetry: TxTelemetry;
  readonly #constraints: ConstraintMap;
  /** What every attempt of this manager shares (hooks, the status reader, the slow threshold). */
  readonly #attemptContext: AttemptContext;
  /**
   * Parsed settings of per-call options made only of primitive values, by their content: the options
   * of a call site repeat, and validating them costs more than the rest of the call. Bounded.
   */
  readonly #settingsCache = new Map<string, Ok<TxSettings, never>>();
  /**
   * The same settings by the options object itself, with the values they were parsed from: a call site
   * that passes one constant object (`tm.do(fn, TX)`) skips building the key. Checked against the
   * object's current values on every call, so a mutated object is parsed again.
   */
  readonly #settingsByObject = new WeakMap<
    object,
    { readonly values: readonly unknown[]; readonly settings: Ok<TxSettings, never> }
  >();
  /** The BEGIN text of each settings object (built once). */
  readonly #beginText = new WeakMap<TxSettings, string>();
  /** The BEGIN statements of each settings object, one by one (built once). */
  readonly #beginList = new WeakMap<TxSettings, readonly string[]>();
  /** Domain errors built by the constraint map: thrown by an inner doOrThrow, they are still values. */
  readonly #mapped = new WeakSet<object>();

  /**
   * @throws InvalidOptions when `options` (or `options.defaults`) are invalid — a configuration bug,
   * found at start-up.
   */
  constructor(pool: pg.Pool, options: TxManagerOptions<C> = {}) {
    if (!isPool(pool)) {
      throw new TypeError('TxManager needs a pg.Pool');
    }
    const parsed = txManagerOptionsSchema.safeParse(options);
    if (!parsed.success) throw new InvalidOptions(toOptionIssues(parsed.error.issues), parsed.error);
    const defaults = parseTxOptions({}, options.defaults ?? {});
    if (defaults.isErr()) {
      throw new InvalidOptions(
        defaults.error.issues.map((issue) => ({ ...issue, path: ['defaults', ...issue.path] })),
        defaults.error,
      );
    }
    this.pool = pool;
    this.strict = parsed.data.strict;
    this.#defaults = options.defaults ?? {};
    this.#defaultSettingsOk = defaults.value.signal === undefined ? ok(defaults.value) : undefined;
    this.#hooks = new HookRunner(options.hooks ?? {}, parsed.data.logger);
    this.#constraints = options.constraints ?? {};
    this.telemetry = resolveOpenTelemetry(options.telemetry);
    this.#telemetry = new TxTelemetry(this.telemetry, pool.options);
    this.#attemptContext = {
      hooks: this.#hooks,
      statuses: new TransactionStatuses(pool),
      slowMs: parsed.data.slowTransactionMs,
      retryMode: parsed.data.retryMode,
    };
    // An idle client's connection error (re-emitted on the pool), or one racing pool.connect(), must
    // not crash the process, and is reported (see guard-client-errors.ts).
    const hooks = this.#hooks;
    guardClientErrors(pool, hooks.reportsPoolErrors ? (error) => hooks.poolError({ error }) : undefined);
    const originalConnect = pool.connect as (this: pg.Pool) => Promise<pg.PoolClient>;
    this.#connect = () => originalConnect.call(pool);
    const replica = parsed.data.replica;
    this.replica = replica;
    if (replica !== undefined) {
      guardClientErrors(replica, hooks.reportsPoolErrors ? (error) => hooks.poolError({ error }) : undefined);
      const originalQuery = pool.query as (this: pg.Pool, text: string) => Promise<pg.QueryResult>;
      this.#router = new ReplicaRouter(replica, parsed.data.readYourWrites, (text) =>
        originalQuery.call(pool, text),
      );
    } else {
      this.#router = undefined;
    }
    if (this.strict) this.#guardPool(pool);
  }

  /**
   * Runs `fn` in a transaction (or joins/nests into the active one, per `propagation`).
   *
   * - `fn` returns a value → COMMIT, `Ok(value)`; returns `err(e)` → ROLLBACK, `Err(e)`.
   * - A database error thrown in `fn` (or at COMMIT) is classified; retryable kinds (`retryOn`) re-run
   *   the whole callback from a fresh BEGIN on the outermost scope; others come back as `Err`, mapped
   *   through `constraints`. `RetriesExhausted` when the attempts, the deadline or the signal run out.
   * - Any other exception is a defect: ROLLBACK, and the returned ResultAsync rejects with it.
   * - Invalid options → `Err(InvalidOptions)` before any SQL.
   *
   * @example
   * const moved = await tm.do(async (tx) => {
   *   await tx.query('UPDATE accounts SET balance = balance - $2 WHERE id = $1', [from, amount]);
   *   await tx.query('UPDATE accounts SET balance = balance + $2 WHERE id = $1', [to, amount]);
   *   return amount;
   * }, { isolation: 'repeatable read', lockTimeout: '1s' });
   */
  do<R>(
    fn: TxCallback<R>,
    options?: TxOptions,
  ): ResultAsync<OkOf<Awaited<R>>, ErrOf<Awaited<R>> | TxError | ConstraintErrors<C>> {
    // Synchronously, in the caller's async context: the read-your-writes session of that context.
    this.#router?.enter();
    return new ResultAsync(this.#run(fn, options)) as ResultAsync<
      OkOf<Awaited<R>>,
      ErrOf<Awaited<R>> | TxError | ConstraintErrors<C>
    >;
  }

  /**
   * Like {@link TxManager.do}, but resolves with the value and throws the same error objects.
   *
   * @example
   * const id = await tm.doOrThrow(async (tx) => {
   *   const { rows } = await tx.query<{ id: number }>('INSERT INTO users (email) VALUES ($1) RETURNING id', [email]);
   *   return rows[0]?.id;
   * });
   */
  async doOrThrow<R>(fn: TxCallback<R>, options?: TxOptions): Promise<OkOf<Awaited<R>>> {
    // What do() runs, without its ResultAsync: one thenable fewer to resolve per call.
    this.#router?.enter();
    const result = await this.#run(fn, options);
    if (result.isErr()) throw result.error;
    return result.value as OkOf<Awaited<R>>;
  }

  /**
   * The active transaction of this manager in the current async context, else the pool ("default
   * transaction or DB"): write repositories against `tm.db()` and they join the caller's transaction.
   *
   * @example
   * const findUser = (id: number) => tm.db().query('SELECT * FROM users WHERE id = $1', [id]);
   *
   * Typed as {@link Queryable} (pg's `query` signatures) so `tm.db().query(…)` type-checks; at run time
   * it is the `Tx` or the `pg.Pool` itself (`isTx(tm.db())` tells them apart).
   */
  db(): Queryable {
    return this.current() ?? this.pool;
  }

  /**
   * The active transaction (scope) of this manager in the current async context, or undefined.
   *
   * @example
   * if (tm.current()?.isolation === 'serializable') { … }
   */
  current(): Tx | undefined {
    return this.#currentHandle();
  }

  /**
   * Counters of this manager since it was created: transactions, commits, attempts, retries and
   * failures by error kind. Exact and in process (no query); the same numbers go to OpenTelemetry
   * metrics when `@opentelemetry/api` is present.
   *
   * @example
   * const { attempts, retries } = tm.metrics();
   * console.log(attempts, retries.SerializationFailure ?? 0);
   */
  metrics(): TxMetrics {
    return this.#telemetry.snapshot();
  }

  #currentHandle(): TxHandle | undefined {
    const handle = this.#als.getStore();
    return handle !== undefined && !handle.closed ? handle : undefined;
  }

  async #run(fn: TxCallback<unknown>, options: TxOptions | undefined): Promise<Result<unknown, unknown>> {
    // Without per-call options the defaults, validated once in the constructor, are the settings.
    const parsed =
      options === undefined && this.#defaultSettingsOk !== undefined
        ? this.#defaultSettingsOk
        : this.#settingsOf(options);
    if (parsed.isErr()) return err(parsed.error);
    const settings = parsed.value;
    const active = this.#currentHandle();
    const plan = planScope(settings.propagation, active !== undefined);
    if (
      active !== undefined &&
      (plan === 'join' || plan === 'savepoint') &&
      options?.isolation !== undefined
    ) {
      // A scope that joins cannot raise the isolation of a transaction already running: silently
      // joining a read committed transaction would void the serializable guarantee asked for.
      if (ISOLATION_RANK[settings.isolation] > ISOLATION_RANK[active.isolation]) {
        return err(
          new InvalidOptions([
            {
              path: ['isolation'],
              message:
                `the active transaction runs at ${active.isolation}; a '${settings.propagation}' scope cannot ` +
                `raise it to ${settings.isolation} (start the outer transaction at that level, or use 'requiresNew')`,
            },
          ]),
        );
      }
    }
    switch (plan) {
      case 'begin':
        return this.#outermost(fn, settings, false);
      case 'beginIndependent':
        return this.#outermost(fn, settings, true);
      case 'join':
        return this.#join(active as TxHandle, fn);
      case 'savepoint':
        return this.#savepoint(active as TxHandle, fn, settings);
      case 'notInTransaction':
        return err(
          new NotInTransaction(
            `tm.do with propagation 'mandatory'${settings.name ? ` (${settings.name})` : ''}`,
          ),
        );
    }
  }

  /** Validated settings of a call's options (merged over the defaults), from the cache when possible. */
  #settingsOf(options: TxOptions | undefined): Result<TxSettings, InvalidOptions> {
    const seen =
      typeof options === 'object' && options !== null ? this.#settingsByObject.get(options) : undefined;
    if (seen !== undefined && sameValues(options as object, seen.values)) return seen.settings;
    const key = primitiveKey(options);
    const hit = key === undefined ? undefined : this.#settingsCache.get(key);
    if (hit !== undefined) {
      // Remembered by object only when it was before (it changed since): an options literal written in
      // the call is a new object each time, and remembering each would cost more than the key.
      if (seen !== undefined) this.#remember(options, hit);
      return hit;
    }
    const parsed = parseTxOptions(options, this.#defaults);
    if (parsed.isOk() && key !== undefined) {
      const settings = ok(parsed.value);
      if (this.#settingsCache.size < SETTINGS_CACHE_SIZE) this.#settingsCache.set(key, settings);
      this.#remember(options, settings);
      return settings;
    }
    return parsed;
  }

  /** Keeps `settings` with the options object they came from (options of primitive values only). */
  #remember(options: TxOptions | undefined, settings: Ok<TxSettings, never>): void {
    if (typeof options !== 'object' || options === null) return;
    const values = valuesOf(options);
    if (values !== undefined) this.#settingsByObject.set(options, { values, settings });
  }

  #beginStatements(settings: TxSettings): readonly string[] {
    let statements = this.#beginList.get(settings);
    if (statements === undefined) {
      statements = beginStatements(settings);
      this.#beginList.set(settings, statements);
    }
    return statements;
  }

  #beginSql(settings: TxSettings): string {
    let text = this.#beginText.get(settings);
    if (text === undefined) {
      text = beginSql(settings);
      this.#beginText.set(settings, text);
    }
    return text;
  }

  /** Runs the callback in the async context of `handle` and sorts out what it produced. */
  async #invoke(handle: TxHandle, fn: TxCallback<unknown>): Promise<ScopeOutcome> {
    try {
      // A `required` scope joining the active one is already in its async context: no new frame.
      // A callback may return a query builder's lazy query (a thenable that sends its SQL only when its
      // `then` is called: drizzle, Prisma, Knex). Node calls the `then` of an awaited thenable from a
      // microtask that does not keep the async context, so it is resolved INSIDE the frame: awaited
      // outside it, `tm.do(() => prisma.user.create(…))` ran its INSERT on the pool, outside the transaction.
      const returned: unknown = await (this.#als.getStore() === handle
        ? fn(handle)
        : this.#als.run(handle, () => Promise.resolve(fn(handle))));
      if (isResult(returned)) {
        if (returned.isOk()) return { type: 'value', value: returned.value };
        // A returned conflict (a pattern's Err(SerializationFailure | DeadlockDetected) or a lost
        // connection) is the same event as a thrown one: the work cannot succeed in this attempt, only
        // a fresh one can. It is treated as a failure, so the outermost scope retries it per `retryOn`.
        if (returned.error instanceof TxKitError && RETURNED_CONFLICTS.has(returned.error.kind)) {
          return { type: 'failure', failure: returned.error as DatabaseFailure };
        }
        return { type: 'err', error: returned.error };
      }
      return { type: 'value', value: returned };
    } catch (error) {
      // Only what pg raised for this transaction (or pg-txkit's own database errors) is a database
      // failure; anything else the callback throws is the user's and goes back unchanged.
      const failure = handle.state.failureOf(error);
      if (failure !== undefined) return { type: 'failure', failure };
      // pg-txkit's own expected errors, and the constraint map's domain errors, thrown by an inner
      // doOrThrow or a pattern, are values too.
      if (error instanceof TxKitError) return { type: 'err', error };
      if (typeof error === 'object' && error !== null && this.#mapped.has(error))
        return { type: 'err', error };
      return { type: 'defect', error };
    }
  }

  /** Maps an integrity failure through the `constraints` option (the service's own error), else returns it. */
  #mapFailure(failure: TxKitError): unknown {
    const constraint = (failure as Partial<ConstraintViolation>).constraint;
    if (typeof constraint !== 'string') return failure;
    const build = Object.hasOwn(this.#constraints, constraint) ? this.#constraints[constraint] : undefined;
    if (typeof build !== 'function') return failure;
    const domain = build(failure as ConstraintViolation);
    if (typeof domain === 'object' && domain !== null) this.#mapped.add(domain);
    return domain;
  }

  /** `required` / `mandatory` inside a transaction: same client, same scope, no retry here. */
  async #join(handle: TxHandle, fn: TxCallback<unknown>): Promise<Result<unknown, unknown>> {
    const outcome = await this.#invoke(handle, fn);
    switch (outcome.type) {
      case 'value':
        return ok(outcome.value);
      case 'err':
        // A domain Err of an inner `required` scope rolls nothing back by itself: the outer scope decides.
        return err(outcome.error);
      case 'failure':
        // Retryable for the outermost scope: doom it so it cannot commit, and let it retry.
        if (handle.state.retries(outcome.failure.kind)) handle.state.doomWith(outcome.failure);
        return err(this.#mapFailure(outcome.failure));
      case 'defect':
        throw outcome.error;
    }
  }

  /** `nested` inside a transaction: SAVEPOINT, serialized with sibling nested scopes. */
  #savepoint(
    parent: TxHandle,
    fn: TxCallback<unknown>,
    settings: TxSettings,
  ): Promise<Result<unknown, unknown>> {
    return parent.exclusive(async () => {
      const state = parent.state;
      if (state.misuse) throw state.misuse;
      if (state.doom) return err(state.doom);
      const savepoint = state.client.escapeIdentifier(state.nextSavepointName());
      const child = parent.child(settings.name);
      // From here until RELEASE / ROLLBACK TO is queued, only this scope (and scopes inside it) may query.
      state.openSavepoint(child);
      try {
        // SAVEPOINT: no lock; marks a point to roll back to without ending the transaction.
        await state.internal(`SAVEPOINT ${savepoint}`);
      } catch (error) {
        state.closeSavepoint(child);
        const failure = state.failureOrRethrow(error);
        state.doomWith(failure);
        return err(failure);
      }
      const outcome = await this.#invoke(child, fn);
      if (outcome.type === 'value' && !state.doom && !state.misuse && !state.aborted) {
        // RELEASE SAVEPOINT: keeps the scope's work (and its locks) in the enclosing transaction.
        const released = state.internal(`RELEASE SAVEPOINT ${savepoint}`);
        state.closeSavepoint(child);
        try {
          await released;
          parent.adopt(child);
          return ok(outcome.value);
        } catch (error) {
          const failure = state.failureOrRethrow(error);
          state.doomWith(failure);
          return err(failure);
        }
      }
      // Roll back the scope's work only; the enclosing transaction goes on.
      let cause: unknown =
        outcome.type === 'value'
          ? (state.misuse ?? state.doom ?? state.abortedFailure())
          : outcome.type === 'failure'
            ? outcome.failure
            : outcome.error;
      if (!state.broken) {
        // ROLLBACK TO SAVEPOINT: undoes the scope's changes and releases locks taken since the savepoint.
        const undone = state.internal(`ROLLBACK TO SAVEPOINT ${savepoint}; RELEASE SAVEPOINT ${savepoint}`);
        state.closeSavepoint(child);
        try {
          await undone;
        } catch (error) {
          state.doomWith(state.failureOf(error) ?? new ConnectionLost(undefined, error));
        }
      } else {
        state.closeSavepoint(child);
      }
      if (state.broken) state.doomWith(state.brokenFailure());
      await this.#runAfterRollback(child.callbacks().afterRollback, cause, child.name);
      if (state.misuse) throw state.misuse;
      if (outcome.type === 'defect') throw outcome.error;
      if (outcome.type === 'err') return err(outcome.error);
      const failure = outcome.type === 'failure' ? outcome.failure : (cause as TxKitError);
      if (state.retries(failure.kind)) state.doomWith(failure);
      cause = this.#mapFailure(failure);
      return err(cause);
    });
  }

  /** An outermost transaction: the retry engine around {@link TxManager.#attempt}, observed. */
  async #outermost(
    fn: TxCallback<unknown>,
    settings: TxSettings,
    independent: boolean,
  ): Promise<Result<unknown, unknown>> {
    const signal = settings.signal;
    if (signal?.aborted) throw signal.reason;
    const startedAt = performance.now();
    const call = this.#telemetry.start(settings);
    let outcome: TxOutcome = { committed: false, error: undefined };
    try {
      const result = await this.#retrying(fn, settings, independent, startedAt, call);
      outcome = result.isOk() ? { committed: true } : { committed: false, error: result.error };
      return result;
    } catch (error) {
      outcome = { committed: false, error };
      throw error;
    } finally {
      this.#telemetry.ended(outcome, startedAt);
      call?.end(outcome);
    }
  }

  async #retrying(
    fn: TxCallback<unknown>,
    settings: TxSettings,
    independent: boolean,
    startedAt: number,
    call: TxCall | undefined,
  ): Promise<Result<unknown, unknown>> {
    const retried = await withRetry<AttemptEnd>(
      async (n) => {
        const run = () => this.#attempt(fn, settings, n, independent, startedAt);
        const end = call === undefined ? await run() : await call.attempt(n, run);
        this.#telemetry.attempted(end);
        if (end.type === 'failure' && retriesFailure(end.failure, settings)) {
          return { done: false, failure: end.failure };
        }
        return { done: true, value: end };
      },
      {
        maxAttempts: settings.maxAttempts,
        backoff: settings.backoff,
        deadlineMs: settings.deadline,
        signal: settings.signal,
        onRetry: (attempt, error, delayMs) => {
          this.#telemetry.retried(error.kind);
          call?.retried(attempt, error.kind, delayMs);
          this.#hooks.retry({ name: settings.name, attempt, error, delayMs });
        },
      },
    );
    if (retried.isErr()) return err(retried.error);
    const end = retried.value;
    switch (end.type) {
      case 'committed':
        if (!settings.readOnly) this.#router?.wrote();
        await this.#runAfterCommit(end.afterCommit, settings.name);
        return ok(end.value);
      case 'err':
        return err(end.error);
      case 'failure':
        return err(this.#mapFailure(end.failure));
      case 'defect':
        throw end.error;
    }
  }

  /** One attempt: check out a client, BEGIN, run the callback, COMMIT or ROLLBACK; the client is always released. */
  async #attempt(
    fn: TxCallback<unknown>,
    settings: TxSettings,
    number: number,
    independent: boolean,
    startedAt: number,
  ): Promise<AttemptEnd> {
    let timeoutMs = settings.acquireTimeout ?? (independent ? REQUIRES_NEW_ACQUIRE_MS : undefined);
    if (settings.deadline !== undefined) {
      const left = Math.max(1, Math.floor(settings.deadline - (performance.now() - startedAt)));
      timeoutMs = Math.min(timeoutMs ?? left, left);
    }
    const options = { timeoutMs, failFast: independent };
    let client: pg.PoolClient;
    let replicaAnswerMs: number | undefined;
    if (this.#router === undefined) {
      // No replica: the primary's client, without the routing layers.
      const acquired = await acquireClient(this.pool, this.#connect, options);
      if (acquired.isErr()) return { type: 'failure', failure: acquired.error };
      client = acquired.value;
    } else {
      const acquired = await this.#acquire(settings, options);
      if (acquired.isErr()) return { type: 'failure', failure: acquired.error };
      ({ client, replicaAnswerMs } = acquired.value);
    }
    const end = await this.#attemptOn(client, replicaAnswerMs, fn, settings, number);
    if (end !== 'unanswered') return end;
    // The replica took the client but did not answer BEGIN in time: nothing of the callback ran; the
    // primary serves the read (it has everything the replica has), and the next reads go there too.
    this.#router?.unreachable();
    const primary = await acquireClient(this.pool, this.#connect, options);
    if (primary.isErr()) return { type: 'failure', failure: primary.error };
    return (await this.#attemptOn(primary.value, undefined, fn, settings, number)) as AttemptEnd;
  }

  /**
   * One attempt on `client`. With `replicaAnswerMs` (a replica's client), BEGIN must answer within it,
   * else 'unanswered' comes back before the callback runs.
   */
  async #attemptOn(
    client: pg.PoolClient,
    replicaAnswerMs: number | undefined,
    fn: TxCallback<unknown>,
    settings: TxSettings,
    number: number,
  ): Promise<AttemptEnd | 'unanswered'> {
    let attempt: TxAttempt;
    try {
      this.#attemptContext.statuses.watch(client);
      attempt = new TxAttempt(client, number, settings, this.#attemptContext);
    } catch (error) {
      client.release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
    try {
      const handle = new TxHandle(attempt, 0, settings.name);
      const text = this.#beginSql(settings);
      // BEGIN goes out with the callback's first statement, in one round trip (first-flight.ts); on a
      // replica it goes first, bounded, so that a silent replica is left before the callback starts.
      const failedBegin =
        replicaAnswerMs !== undefined
          ? await attempt.beginWithin(text, replicaAnswerMs)
          : attempt.defer(this.#beginStatements(settings))
            ? undefined
            : await attempt.begin(text);
      if (failedBegin === 'unanswered') return failedBegin;
      const end = failedBegin ?? (await this.#runScope(attempt, handle, fn));
      if (end.type !== 'committed') {
        await this.#runAfterRollback(
          handle.callbacks().afterRollback,
          end.type === 'failure' ? end.failure : end.error,
          settings.name,
        );
      }
      return end;
    } finally {
      // Every path, a defect of ours included, gives the client back exactly once (destroyed unless idle).
      attempt.release();
    }
  }

  /**
   * The client of an attempt: from the replica when the router sends it there (and, inside a
   * read-your-writes window, only when that replica client has replayed the context's last write), else
   * from the primary pool. A replica client comes with `replicaAnswerMs`, the bound its BEGIN must
   * answer within. A replica that refuses the connection, or does not hand out a client within that
   * bound, sends the read to the primary (and, when it had room for a client and still gave none, the
   * next reads too, for the router's cooldown).
   */
  async #acquire(
    settings: TxSettings,
    options: { timeoutMs: number | undefined; failFast: boolean },
  ): Promise<Result<{ client: pg.PoolClient; replicaAnswerMs: number | undefined }, DatabaseFailure>> {
    const router = this.#router;
    if (router !== undefined) {
      const route = await router.route(settings);
      if (route.to === 'replica') {
        const answerMs = router.answerMs(options.timeoutMs);
        // A replica pool with room for a client that still gives none in time is not answering; a full
        // one is only busy.
        const hadRoom = freeClients(router.pool) > 0;
        const acquired = await acquireClient(router.pool, router.connect, {
          ...options,
          timeoutMs: answerMs,
        });
        if (acquired.isErr()) {
          const kind = acquired.error.kind;
          if (kind !== 'ConnectionLost' && kind !== 'PoolExhausted') return err(acquired.error);
          if (kind === 'ConnectionLost' || hadRoom) router.unreachable();
          return this.#primaryClient(options);
        }
        const client = acquired.value;
        if (route.lsn === undefined) return ok({ client, replicaAnswerMs: answerMs });
        const replayed = await router.replayed(client, route.lsn, answerMs);
        if (replayed === 'replayed') return ok({ client, replicaAnswerMs: answerMs });
        // Not replayed yet: the read goes to the primary, and this healthy client back to its pool.
        client.release(replayed === 'failed' ? new Error('pg-txkit: replay check failed') : undefined);
      }
    }
    return this.#primaryClient(options);
  }

  async #primaryClient(options: {
    timeoutMs: number | undefined;
    failFast: boolean;
  }): Promise<Result<{ client: pg.PoolClient; replicaAnswerMs: undefined }, DatabaseFailure>> {
    const acquired = await acquireClient(this.pool, this.#connect, options);
    return acquired.map((client) => ({ client, replicaAnswerMs: undefined }));
  }

  /** Runs the outermost scope's callback and ends the attempt: COMMIT when it may, else ROLLBACK. */
  async #runScope(attempt: TxAttempt, handle: TxHandle, fn: TxCallback<unknown>): Promise<AttemptEnd> {
    const outcome = await this.#invoke(handle, fn);
    // BEGIN, sent with the first statement, failed: the attempt ends as a failed BEGIN always has —
    // nothing ran in a transaction, nothing to roll back — whatever the callback made of the error.
    const failedBegin = attempt.beginEnd;
    if (failedBegin !== undefined) return failedBegin;
    let end: AttemptEnd;
    if (attempt.misuse) {
      // The transaction was misused (ended through tx.query, a concurrent scope): a defect, never Ok.
      end = { type: 'defect', error: attempt.misuse };
    } else if (outcome.type === 'value') {
      const blocked = attempt.doom ?? (attempt.aborted ? attempt.abortedFailure() : undefined);
      if (blocked === undefined) return attempt.commit(outcome.value, handle.callbacks().afterCommit);
      end = { type: 'failure', failure: blocked };
    } else if (outcome.type === 'failure') {
      // A doom (e.g. a serialization failure an inner scope swallowed) wins over what fn threw after it.
      end = { type: 'failure', failure: attempt.doom ?? outcome.failure };
    } else if (outcome.type === 'err') {
      const doom = attempt.doom;
      end = doom && attempt.retries(doom.kind) ? { type: 'failure', failure: doom } : outcome;
    } else {
      end = outcome;
    }
    return attempt.rollback(end);
  }

  async #runAfterCommit(callbacks: readonly AfterCommit[], name: string | undefined): Promise<void> {
    for (const callback of callbacks) {
      try {
        await callback();
      } catch (error) {
        this.#hooks.callbackError({ name, source: 'afterCommit', error });
      }
    }
  }

  async #runAfterRollback(
    callbacks: readonly AfterRollback[],
    cause: unknown,
    name: string | undefined,
  ): Promise<void> {
    for (const callback of callbacks) {
      try {
        await callback(cause);
      } catch (error) {
        this.#hooks.callbackError({ name, source: 'afterRollback', error });
      }
    }
  }

  /** strict mode: shadow `query` and `connect` on this pool instance with guarded versions. */
  #guardPool(pool: pg.Pool): void {
    const guard = (what: string): void => {
      const active = this.#currentHandle();
      if (active !== undefined) {
        throw new TxUsageError(
          'pool-in-transaction',
          `pool.${what}() called while transaction${active.name ? ` "${active.name}"` : ''} is active in this async ` +
            'context: that query would run on another connection, outside the transaction (and could wait on ' +
            "it forever). Use tm.db() or the callback's tx instead.",
        );
      }
    };
    const query = pool.query;
    const connect = pool.connect;
    Object.defineProperty(pool, 'query', {
      configurable: true,
      writable: true,
      value: function guardedQuery(this: pg.Pool, ...args: unknown[]): unknown {
        guard('query');
        return (query as (...a: unknown[]) => unknown).apply(this, args);
      },
    });
    Object.defineProperty(pool, 'connect', {
      configurable: true,
      writable: true,
      value: function guardedConnect(this: pg.Pool, ...args: unknown[]): unknown {
        guard('connect');
        return (connect as (...a: unknown[]) => unknown).apply(this, args);
      },
    });
  }
}
