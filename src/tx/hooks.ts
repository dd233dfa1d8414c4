import type { TxKitError } from '../errors/index.js';
import type { Logger } from '../observability/logger.js';

/** Passed to {@link TxHooks.onRetry}. */
export interface RetryEvent {
  /** `TxOptions.name` of the outermost transaction. */
  readonly name: string | undefined;
  /** The attempt that failed (1-based); the next one is `attempt + 1`. */
  readonly attempt: number;
  /** Why it failed. */
  readonly error: TxKitError;
  /** How long the manager waits before the next attempt. */
  readonly delayMs: number;
}

/** Passed to {@link TxHooks.onCommit}. */
export interface CommitEvent {
  /** `TxOptions.name` of the outermost transaction. */
  readonly name: string | undefined;
  /** The attempt that committed (1-based). */
  readonly attempt: number;
  /** From BEGIN sent to COMMIT acknowledged. */
  readonly durationMs: number;
}

/** Passed to {@link TxHooks.onRollback}. */
export interface RollbackEvent {
  /** `TxOptions.name` of the outermost transaction. */
  readonly name: string | undefined;
  /** The attempt that rolled back (1-based). */
  readonly attempt: number;
  /** From BEGIN sent to ROLLBACK done (or the connection dropped). */
  readonly durationMs: number;
  /** What rolled it back: a TxKitError, the callback's own `Err` value, or a defect. */
  readonly error: unknown;
  /** Set when the ROLLBACK itself failed (the client was then destroyed, not returned to the pool). */
  readonly rollbackError?: unknown;
}

/** Passed to {@link TxHooks.onSlowTransaction}. */
export interface SlowTransactionEvent {
  /** `TxOptions.name` of the outermost transaction. */
  readonly name: string | undefined;
  /** The attempt that held its connection this long (1-based). */
  readonly attempt: number;
  /** How long the transaction (this attempt) held its connection and locks. */
  readonly durationMs: number;
}

/** Passed to {@link TxHooks.onPoolError}. */
export interface PoolErrorEvent {
  /** What pg-pool emitted: the error of an idle pooled client whose connection failed. */
  readonly error: Error;
}

/** Passed to {@link TxHooks.onCallbackError}. */
export interface CallbackErrorEvent {
  /** `TxOptions.name` of the transaction whose callback or hook threw. */
  readonly name: string | undefined;
  /** Which callback threw: an `afterCommit` / `afterRollback` callback, or one of the hooks. */
  readonly source:
    | 'afterCommit'
    | 'afterRollback'
    | 'onRetry'
    | 'onCommit'
    | 'onRollback'
    | 'onSlowTransaction'
    | 'onPoolError';
  /** What it threw. */
  readonly error: unknown;
}

/**
 * Observability hooks of a `TxManager`. Hooks are synchronous notifications; a hook that throws is
 * reported to `onCallbackError` and never changes the transaction's outcome.
 *
 * @example
 * const tm = new TxManager(pool, {
 *   hooks: {
 *     onRetry: ({ name, attempt, error, delayMs }) => log.warn({ name, attempt, kind: error.kind, delayMs }),
 *     onSlowTransaction: ({ name, durationMs }) => log.warn(`${name} held its connection ${durationMs} ms`),
 *     onCallbackError: ({ source, error }) => log.error({ source, error }),
 *   },
 *   slowTransactionMs: 500,
 * });
 */
export interface TxHooks {
  /** Before waiting for the next attempt of a retried transaction. */
  onRetry?(event: RetryEvent): void;
  /** After each successful outermost COMMIT. */
  onCommit?(event: CommitEvent): void;
  /** After each rolled-back attempt (retried or final). */
  onRollback?(event: RollbackEvent): void;
  /** When an attempt held its connection longer than `slowTransactionMs` (an external call inside a tx?). */
  onSlowTransaction?(event: SlowTransactionEvent): void;
  /**
   * An idle pooled client's connection failed (server restart, failover, `idle_session_timeout`, a proxy
   * cutting idle sessions): pg-pool emitted the error on the pool and dropped the client. Without this
   * hook (and without a `pool.on('error')` of your own) one line is written to `console.error`, at most
   * once a minute; the process never dies of it either way.
   */
  onPoolError?(event: PoolErrorEvent): void;
  /**
   * An `afterCommit`/`afterRollback` callback or a hook threw. The committed transaction stays
   * committed. Default: `process.emitWarning`.
   */
  onCallbackError?(event: CallbackErrorEvent): void;
}

/**
 * Calls hooks without ever letting them throw into the transaction machinery, and writes the same
 * events to the manager's `logger` when one is given (retries at debug, slow transactions at warn,
 * pool and callback errors at error).
 */
export class HookRunner {
  readonly #hooks: TxHooks;
  readonly #logger: Logger | undefined;
  constructor(hooks: TxHooks, logger?: Logger) {
    this.#hooks = hooks;
    this.#logger = logger;
  }

  /** Reports an error of a callback or hook. */
  callbackError(event: CallbackErrorEvent): void {
    const { name, source } = event;
    this.#log(
      'error',
      { err: event.error, source, name },
      `pg-txkit: ${source} of transaction ${name ?? '(unnamed)'} threw`,
    );
    try {
      if (this.#hooks.onCallbackError) {
        this.#hooks.onCallbackError(event);
        return;
      }
    } catch {
      // The error reporter itself failed: fall through to the process warning.
    }
    if (this.#logger !== undefined) return;
    const error = event.error instanceof Error ? event.error : new Error(String(event.error));
    process.emitWarning(error, {
      type: 'PgTxkitCallbackError',
      detail: `${event.source} of transaction ${event.name ?? '(unnamed)'} threw`,
    });
  }

  retry(event: RetryEvent): void {
    const { name, attempt, error, delayMs } = event;
    this.#log(
      'debug',
      { name, attempt, kind: error.kind, delayMs },
      `pg-txkit: attempt ${attempt} failed (${error.kind}), retrying`,
    );
    this.#call('onRetry', event.name, () => this.#hooks.onRetry?.(event));
  }
  commit(event: CommitEvent): void {
    // Every committed transaction comes here: no closure, no try, when there is no hook to call.
    if (this.#hooks.onCommit === undefined) return;
    this.#call('onCommit', event.name, () => this.#hooks.onCommit?.(event));
  }
  rollback(event: RollbackEvent): void {
    this.#call('onRollback', event.name, () => this.#hooks.onRollback?.(event));
  }
  /** Whether an `onPoolError` hook was given (else the pool guard writes its own line). */
  get reportsPoolErrors(): boolean {
    return this.#hooks.onPoolError !== undefined || this.#logger !== undefined;
  }
  poolError(event: PoolErrorEvent): void {
    this.#log(
      'error',
      { err: event.error },
      'pg-txkit: an idle pooled connection failed; the pool dropped it',
    );
    this.#call('onPoolError', undefined, () => this.#hooks.onPoolError?.(event));
  }
  slow(event: SlowTransactionEvent): void {
    const { name, attempt, durationMs } = event;
    this.#log(
      'warn',
      { name, attempt, durationMs },
      `pg-txkit: transaction ${name ?? '(unnamed)'} held its connection ${Math.round(durationMs)} ms`,
    );
    this.#call('onSlowTransaction', event.name, () => this.#hooks.onSlowTransaction?.(event));
  }

  #log(level: keyof Logger, obj: Record<string, unknown>, msg: string): void {
    if (this.#logger === undefined) return;
    try {
      this.#logger[level](obj, msg);
    } catch {
      // A throwing logger never changes the transaction's outcome.
    }
  }

  #call(source: CallbackErrorEvent['source'], name: string | undefined, fn: () => void): void {
    try {
      fn();
    } catch (error) {
      this.callbackError({ name, source, error });
    }
  }
}
