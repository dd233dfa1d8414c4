import { AsyncLocalStorage } from 'node:async_hooks';
import { type Err, err, type Ok, ok, type Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import {
  CommitOutcomeUnknown,
  ConnectionLost,
  classify,
  type DatabaseFailure,
  InvalidOptions,
  isConnectionError,
  NotInTransaction,
  type TxError,
  TxKitError,
} from '../errors/index.js';
import { acquireClient } from './acquire-client.js';
import { beginSql } from './begin-sql.js';
import { guardClientErrors } from './guard-client-errors.js';
import { HookRunner } from './hooks.js';
import { isPool } from './is-pool.js';
import { isResult } from './is-result.js';
import { planScope } from './propagation.js';
import { withRetry } from './retry.js';
import { TxAttempt } from './tx-attempt.js';
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

/** The success type of a callback's return: `T` for a plain `T`, or the `Ok` type of a `Result`. */
export type OkOf<R> = R extends Ok<infer T, unknown> ? T : R extends Err<infer T, unknown> ? T : R;
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

/** Wait for a second client in `requiresNew` inside a transaction, when no `acquireTimeout` is given. */
const REQUIRES_NEW_ACQUIRE_MS = 2000;

/** What one run of a callback in a scope produced. */
type ScopeOutcome =
  | { readonly type: 'value'; readonly value: unknown }
  | { readonly type: 'err'; readonly error: unknown }
  | { readonly type: 'failure'; readonly failure: DatabaseFailure }
  | { readonly type: 'defect'; readonly error: unknown };

/** How one attempt of an outermost transaction ended. */
type AttemptEnd =
  | { readonly type: 'committed'; readonly value: unknown; readonly afterCommit: readonly AfterCommit[] }
  | { readonly type: 'err'; readonly error: unknown }
  | { readonly type: 'failure'; readonly failure: TxKitError }
  | { readonly type: 'defect'; readonly error: unknown };

const NOT_SENT = [
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
];

/**
 * Did COMMIT certainly NOT reach the server? True when pg refused to send it (the client already knew
 * the connection was dead), or when the socket write itself failed (`syscall: 'write'`: the kernel
 * refused the bytes because the peer had already reset the connection). A failure while READING the
 * answer is different: COMMIT may have been executed.
 */
function commitNotDelivered(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (NOT_SENT.some((m) => error.message.includes(m))) return true;
  return (error as { syscall?: unknown }).syscall === 'write';
}

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
  readonly #als = new AsyncLocalStorage<TxHandle>();
  readonly #connect: () => Promise<pg.PoolClient>;
  readonly #defaults: TxOptions;
  /** `#defaults` parsed, when they hold no per-call state (no signal): reused by calls without options. */
  readonly #defaultSettings: TxSettings | undefined;
  readonly #hooks: HookRunner;
  readonly #constraints: ConstraintMap;
  readonly #slowMs: number;
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
    this.#defaultSettings = defaults.value.signal === undefined ? defaults.value : undefined;
    this.#hooks = new HookRunner(options.hooks ?? {});
    this.#constraints = options.constraints ?? {};
    this.#slowMs = parsed.data.slowTransactionMs;
    // An idle client's connection error (re-emitted on the pool), or one racing pool.connect(), must
    // not crash the process, and is reported (see guard-client-errors.ts).
    const hooks = this.#hooks;
    guardClientErrors(pool, hooks.reportsPoolErrors ? (error) => hooks.poolError({ error }) : undefined);
    const originalConnect = pool.connect as (this: pg.Pool) => Promise<pg.PoolClient>;
    this.#connect = () => originalConnect.call(pool);
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
    const result = await this.do(fn, options);
    if (result.isErr()) throw result.error;
    return result.value;
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

  #currentHandle(): TxHandle | undefined {
    const handle = this.#als.getStore();
    return handle !== undefined && !handle.closed ? handle : undefined;
  }

  async #run(fn: TxCallback<unknown>, options: TxOptions | undefined): Promise<Result<unknown, unknown>> {
    // Without per-call options the defaults, validated once in the constructor, are the settings.
    const parsed =
      options === undefined && this.#defaultSettings !== undefined
        ? ok(this.#defaultSettings)
        : parseTxOptions(options, this.#defaults);
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

  /** Runs the callback in the async context of `handle` and sorts out what it produced. */
  async #invoke(handle: TxHandle, fn: TxCallback<unknown>): Promise<ScopeOutcome> {
    try {
      const returned: unknown = await this.#als.run(handle, () => fn(handle));
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
      const failure = classify(error);
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
      if (state.doom) return err(state.doom);
      const client = state.client;
      const savepoint = client.escapeIdentifier(state.nextSavepointName());
      const child = parent.child(settings.name);
      try {
        // SAVEPOINT: no lock; marks a point to roll back to without ending the transaction.
        await client.query(`SAVEPOINT ${savepoint}`);
      } catch (error) {
        const shown = state.noteQueryError(error);
        const failure = classify(shown);
        if (failure === undefined) throw shown;
        state.doomWith(failure);
        return err(failure);
      }
      const outcome = await this.#invoke(child, fn);
      if (outcome.type === 'value' && !state.doom && client.getTransactionStatus() !== 'E') {
        try {
          // RELEASE SAVEPOINT: keeps the scope's work (and its locks) in the enclosing transaction.
          await client.query(`RELEASE SAVEPOINT ${savepoint}`);
          parent.adopt(child);
          return ok(outcome.value);
        } catch (error) {
          const failure = classify(state.noteQueryError(error));
          if (failure === undefined) throw error;
          state.doomWith(failure);
          return err(failure);
        }
      }
      // Roll back the scope's work only; the enclosing transaction goes on.
      let cause: unknown =
        outcome.type === 'value'
          ? (state.doom ?? state.abortedFailure())
          : outcome.type === 'failure'
            ? outcome.failure
            : outcome.error;
      if (!state.broken) {
        try {
          // ROLLBACK TO SAVEPOINT: undoes the scope's changes and releases locks taken since the savepoint.
          await client.query(`ROLLBACK TO SAVEPOINT ${savepoint}; RELEASE SAVEPOINT ${savepoint}`);
        } catch (error) {
          const failure = classify(state.noteQueryError(error));
          state.doomWith(failure ?? new ConnectionLost(undefined, error));
        }
      }
      if (state.broken) state.doomWith(new ConnectionLost(undefined, state.connectionError));
      await this.#runAfterRollback(child.callbacks().afterRollback, cause, child.name);
      if (outcome.type === 'defect') throw outcome.error;
      if (outcome.type === 'err') return err(outcome.error);
      const failure = outcome.type === 'failure' ? outcome.failure : (cause as TxKitError);
      if (state.retries(failure.kind)) state.doomWith(failure);
      cause = this.#mapFailure(failure);
      return err(cause);
    });
  }

  /** An outermost transaction: the retry loop around {@link TxManager.#attempt}. */
  async #outermost(
    fn: TxCallback<unknown>,
    settings: TxSettings,
    independent: boolean,
  ): Promise<Result<unknown, unknown>> {
    const signal = settings.signal;
    if (signal?.aborted) throw signal.reason;
    const startedAt = performance.now();
    const retried = await withRetry<AttemptEnd>(
      async (n) => {
        const end = await this.#attempt(fn, settings, n, independent, startedAt);
        if (
          end.type === 'failure' &&
          end.failure.kind !== 'CommitOutcomeUnknown' &&
          settings.retryOn.includes(end.failure.kind as never)
        ) {
          return { done: false, failure: end.failure };
        }
        return { done: true, value: end };
      },
      {
        maxAttempts: settings.maxAttempts,
        backoff: settings.backoff,
        deadlineMs: settings.deadline,
        startedAt,
        signal,
        onRetry: (attempt, error, delayMs) =>
          this.#hooks.retry({ name: settings.name, attempt, error, delayMs }),
      },
    );
    if (retried.isErr()) return err(retried.error);
    const end = retried.value;
    switch (end.type) {
      case 'committed':
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

  /** One attempt: check out a client, BEGIN, run the callback, COMMIT or ROLLBACK, release. */
  async #attempt(
    fn: TxCallback<unknown>,
    settings: TxSettings,
    attempt: number,
    independent: boolean,
    startedAt: number,
  ): Promise<AttemptEnd> {
    let timeoutMs = settings.acquireTimeout ?? (independent ? REQUIRES_NEW_ACQUIRE_MS : undefined);
    if (settings.deadline !== undefined) {
      const left = Math.max(1, Math.floor(settings.deadline - (performance.now() - startedAt)));
      timeoutMs = Math.min(timeoutMs ?? left, left);
    }
    const acquired = await acquireClient(this.pool, this.#connect, { timeoutMs, failFast: independent });
    if (acquired.isErr()) return { type: 'failure', failure: acquired.error };
    const client = acquired.value;
    const state = new TxAttempt(client, attempt, settings);
    // A checked-out client has no pool listener: without ours, a dropped connection would crash the process.
    const onError = (error: unknown): void => state.markBroken(error);
    client.on('error', onError);
    const begunAt = performance.now();
    const handle = new TxHandle(state, 0, settings.name);
    let end: AttemptEnd;
    let rollbackError: unknown;
    try {
      await client.query(beginSql(settings));
    } catch (error) {
      const failure = classify(state.noteQueryError(error));
      end = failure === undefined ? { type: 'defect', error } : { type: 'failure', failure };
      rollbackError = await this.#rollback(state);
      return this.#finishRollback(state, handle, onError, begunAt, end, rollbackError);
    }

    const outcome = await this.#invoke(handle, fn);
    if (outcome.type === 'value') {
      const blocked =
        state.doom ?? (client.getTransactionStatus() === 'E' ? state.abortedFailure() : undefined);
      if (blocked === undefined) return this.#commit(state, handle, onError, begunAt, outcome.value);
      end = { type: 'failure', failure: blocked };
    } else if (outcome.type === 'failure') {
      // A doom (e.g. a serialization failure an inner scope swallowed) wins over what fn threw after it.
      end = { type: 'failure', failure: state.doom ?? outcome.failure };
    } else if (outcome.type === 'err') {
      end = state.doom && state.retries(state.doom.kind) ? { type: 'failure', failure: state.doom } : outcome;
    } else {
      end = outcome;
    }
    rollbackError = await this.#rollback(state);
    return this.#finishRollback(state, handle, onError, begunAt, end, rollbackError);
  }

  /** Sends COMMIT and decides what its failure means. */
  async #commit(
    state: TxAttempt,
    handle: TxHandle,
    onError: (error: unknown) => void,
    begunAt: number,
    value: unknown,
  ): Promise<AttemptEnd> {
    state.close();
    const client = state.client;
    let failure: TxKitError | undefined;
    if (state.broken) {
      // The connection died before COMMIT was sent: the server rolled back; safe to retry.
      failure = new ConnectionLost(undefined, state.connectionError);
    } else {
      try {
        // COMMIT: releases every lock of the transaction. SSI may still refuse it here with 40001.
        const result = await client.query('COMMIT');
        // COMMIT of a transaction that had failed answers "ROLLBACK" without an error.
        if (result.command === 'ROLLBACK') failure = state.abortedFailure();
      } catch (error) {
        if (commitNotDelivered(error)) {
          state.markBroken(error);
          failure = new ConnectionLost(undefined, error);
        } else {
          const classified = classify(error);
          if (classified === undefined || classified.kind === 'ConnectionLost' || isConnectionError(error)) {
            // COMMIT was sent and the connection broke before the answer: it may or may not have committed.
            state.markBroken(error);
            failure = new CommitOutcomeUnknown(error);
          } else {
            failure = classified;
          }
        }
      }
    }
    if (failure !== undefined) {
      return this.#finishRollback(state, handle, onError, begunAt, { type: 'failure', failure }, undefined);
    }
    const durationMs = performance.now() - begunAt;
    this.#release(state, onError);
    this.#hooks.commit({ name: state.settings.name, attempt: state.number, durationMs });
    this.#reportSlow(state, durationMs);
    return { type: 'committed', value, afterCommit: handle.callbacks().afterCommit };
  }

  /** ROLLBACK unless the connection is gone; returns the ROLLBACK's own error, if it failed. */
  async #rollback(state: TxAttempt): Promise<unknown> {
    state.close();
    const status = state.client.getTransactionStatus();
    if (state.broken || status === 'I') return undefined;
    try {
      // ROLLBACK: undoes everything and releases every lock of the transaction.
      await state.client.query('ROLLBACK');
      return undefined;
    } catch (error) {
      state.markBroken(error);
      return error;
    }
  }

  async #finishRollback(
    state: TxAttempt,
    handle: TxHandle,
    onError: (error: unknown) => void,
    begunAt: number,
    end: AttemptEnd,
    rollbackError: unknown,
  ): Promise<AttemptEnd> {
    const durationMs = performance.now() - begunAt;
    this.#release(state, onError);
    const error = end.type === 'failure' ? end.failure : end.type === 'committed' ? undefined : end.error;
    if (rollbackError !== undefined) attachCause(error, rollbackError);
    this.#hooks.rollback({
      name: state.settings.name,
      attempt: state.number,
      durationMs,
      error,
      ...(rollbackError === undefined ? {} : { rollbackError }),
    });
    this.#reportSlow(state, durationMs);
    await this.#runAfterRollback(handle.callbacks().afterRollback, error, state.settings.name);
    return end;
  }

  /** Returns the client: destroyed if broken or (never expected) still inside a transaction. */
  #release(state: TxAttempt, onError: (error: unknown) => void): void {
    const client = state.client;
    state.close();
    if (state.broken || client.getTransactionStatus() !== 'I') {
      // Keep our 'error' listener on a client being destroyed: a late socket error must not crash the process.
      const reason =
        state.connectionError instanceof Error
          ? state.connectionError
          : new Error(
              'pg-txkit: client left inside a transaction; destroyed instead of returned to the pool',
            );
      client.release(reason);
      return;
    }
    client.removeListener('error', onError);
    client.release();
  }

  #reportSlow(state: TxAttempt, durationMs: number): void {
    if (durationMs >= this.#slowMs) {
      this.#hooks.slow({ name: state.settings.name, attempt: state.number, durationMs });
    }
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

/**
 * A failed ROLLBACK never replaces the original error: it is attached as the original's `cause` when
 * that has none (and always given to `onRollback` as `rollbackError`).
 */
function attachCause(error: unknown, rollbackError: unknown): void {
  if (typeof error !== 'object' || error === null || 'cause' in error) return;
  if (!Object.isExtensible(error)) return;
  Object.defineProperty(error, 'cause', { value: rollbackError, configurable: true, writable: true });
}
