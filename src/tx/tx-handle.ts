import type pg from 'pg';
import type { FlightOutcome, FlightSpec } from './flight-spec.js';
import { Mutex } from './mutex.js';
import type { AttemptScope, TxAttempt } from './tx-attempt.js';
import { TxUsageError } from './tx-usage-error.js';
import { type AfterCommit, type AfterRollback, type Isolation, TX, type Tx } from './types.js';

/** No callbacks (shared, never written to). */
const NONE: readonly never[] = Object.freeze([]);

/**
 * The {@link Tx} given to callbacks: one scope (the outermost transaction, or a `nested` savepoint)
 * of one attempt. Queries go to the attempt's pinned client; once the transaction is doomed they fail
 * at once with the dooming error, and once it has ended they throw {@link TxUsageError}.
 *
 * @example
 * await tm.doOrThrow(async (tx) => {
 *   const { rows } = await tx.query<{ n: number }>('SELECT $1::int AS n', [1]);
 *   tx.afterCommit(() => console.log('committed', rows[0]?.n));
 * });
 */
export class TxHandle implements Tx, AttemptScope {
  readonly [TX] = true as const;
  readonly attempt: number;
  readonly isolation: Isolation;
  readonly readOnly: boolean;
  readonly name: string | undefined;
  readonly depth: number;
  readonly #state: TxAttempt;
  readonly #parent: TxHandle | undefined;
  /** Registered callbacks (made at the first: most transactions register none). */
  #afterCommit: AfterCommit[] | undefined;
  #afterRollback: AfterRollback[] | undefined;
  #children: Mutex | undefined;

  constructor(state: TxAttempt, depth: number, name: string | undefined, parent?: TxHandle) {
    this.#state = state;
    this.#parent = parent;
    this.attempt = state.number;
    this.isolation = state.settings.isolation;
    this.readOnly = state.settings.readOnly;
    this.name = name;
    this.depth = depth;
  }

  /** @internal The attempt this scope belongs to. */
  get state(): TxAttempt {
    return this.#state;
  }

  /** Has the transaction ended (committed, rolled back, or being finished)? */
  get closed(): boolean {
    return this.#state.closed;
  }

  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
  ): Promise<pg.QueryResult<R>>;
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    config: pg.QueryConfig,
  ): Promise<pg.QueryResult<R>>;
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    config: pg.QueryConfig,
    values: readonly unknown[] | undefined,
  ): Promise<pg.QueryResult<R>>;
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    textOrConfig: string | pg.QueryConfig,
    values?: readonly unknown[],
  ): Promise<pg.QueryResult<R>> {
    return this.#state.query<R>(this, [textOrConfig, values]);
  }

  /**
   * @internal `spec` in one round trip on this scope (see `sendFlight`), or undefined when this
   * client cannot write flights (then nothing was sent).
   */
  flight<R extends pg.QueryResultRow>(spec: FlightSpec): Promise<FlightOutcome<R>> | undefined {
    return this.#state.flight<R>(this, spec);
  }

  /** @internal Is this scope `owner` itself, or a scope opened inside it? */
  within(owner: AttemptScope): boolean {
    for (let scope: TxHandle | undefined = this; scope !== undefined; scope = scope.#parent) {
      if (scope === owner) return true;
    }
    return false;
  }

  afterCommit(fn: AfterCommit): void {
    this.#assertOpen('afterCommit');
    this.#afterCommit ??= [];
    this.#afterCommit.push(fn);
  }

  afterRollback(fn: AfterRollback): void {
    this.#assertOpen('afterRollback');
    this.#afterRollback ??= [];
    this.#afterRollback.push(fn);
  }

  /** @internal A scope for a savepoint under this one. */
  child(name: string | undefined): TxHandle {
    return new TxHandle(this.#state, this.depth + 1, name ?? this.name, this);
  }

  /** @internal Runs `fn` exclusively among this scope's nested children (savepoints never interleave). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    this.#children ??= new Mutex();
    return this.#children.run(fn);
  }

  /** @internal A released savepoint's callbacks now belong to this scope. */
  adopt(child: TxHandle): void {
    if (child.#afterCommit !== undefined)
      this.#afterCommit = [...(this.#afterCommit ?? []), ...child.#afterCommit];
    if (child.#afterRollback !== undefined) {
      this.#afterRollback = [...(this.#afterRollback ?? []), ...child.#afterRollback];
    }
  }

  /** @internal The callbacks registered on this scope (and adopted from released children). */
  callbacks(): {
    readonly afterCommit: readonly AfterCommit[];
    readonly afterRollback: readonly AfterRollback[];
  } {
    return {
      afterCommit: this.#afterCommit === undefined ? NONE : [...this.#afterCommit],
      afterRollback: this.#afterRollback === undefined ? NONE : [...this.#afterRollback],
    };
  }

  #assertOpen(what: string): void {
    if (this.#state.closed) {
      throw new TxUsageError('transaction-closed', `${what}() called after the transaction ended`);
    }
  }
}
