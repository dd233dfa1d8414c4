import type pg from 'pg';
import {
  type ClassifyRules,
  CommitOutcomeUnknown,
  ConnectionLost,
  classify,
  classifyOrRethrow,
  type DatabaseFailure,
  DbError,
  isConnectionError,
  type TxKitError,
} from '../errors/index.js';
import {
  type FirstFlightClass,
  type FirstFlightQuery,
  type FlightPart,
  type FlightStatement,
  firstFlightClass,
  fitsFirstFlight,
} from './first-flight.js';
import type { FlightOutcome, FlightSpec } from './flight-spec.js';
import type { HookRunner } from './hooks.js';
import { commitFailure, type RetryMode } from './retryable.js';
import { controlStatements } from './transaction-control.js';
import type { TransactionStatuses } from './transaction-status.js';
import type { TxSettings } from './tx-options.js';
import { TxUsageError } from './tx-usage-error.js';
import type { AfterCommit } from './types.js';

/** SQLSTATE 25P02 in_failed_sql_transaction: "current transaction is aborted, commands ignored …". */
const IN_FAILED_TRANSACTION = '25P02';

/** pg's messages for a query it refused to send (the client already knew its connection was dead). */
const NOT_SENT = [
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
];

/** How one attempt of an outermost transaction ended. */
export type AttemptEnd =
  | { readonly type: 'committed'; readonly value: unknown; readonly afterCommit: readonly AfterCommit[] }
  | { readonly type: 'err'; readonly error: unknown }
  | { readonly type: 'failure'; readonly failure: TxKitError }
  | { readonly type: 'defect'; readonly error: unknown };

/** What an attempt needs from its manager. */
export interface AttemptContext {
  readonly hooks: HookRunner;
  readonly statuses: TransactionStatuses;
  /** An attempt holding its connection this long calls `onSlowTransaction`. */
  readonly slowMs: number;
  /** How an error raised by COMMIT is read (see `RETRY_MODES`). */
  readonly retryMode: RetryMode;
}

/** A scope that may query through an attempt: `within(owner)` says whether it is `owner` or inside it. */
export interface AttemptScope {
  within(owner: AttemptScope): boolean;
  readonly name: string | undefined;
}

/** The query a scope sends: pg's text + values, or a config object. */
type QueryArgs = readonly [text: string | pg.QueryConfig, values?: readonly unknown[] | undefined];

/** Statements that travel with a query (see {@link TxAttempt.flight}), and where the flight failed. */
interface Around {
  readonly opening: readonly FlightStatement[];
  readonly closing: readonly FlightStatement[];
  failedPart?: FlightPart;
}

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
 * ONE attempt of an outermost transaction, and everything it owns: its pinned client (checked out for
 * the whole attempt, released exactly once, destroyed when it cannot be trusted), its timings, its
 * hooks, and its lifecycle — {@link TxAttempt.begin}, {@link TxAttempt.query},
 * {@link TxAttempt.commit}, {@link TxAttempt.rollback}, {@link TxAttempt.release}. Shared by every scope
 * (`required` joins, `nested` savepoints) of the attempt. Internal to the manager.
 *
 * What it guarantees:
 * - one query at a time on the client (pg must never queue a second query on a busy client);
 * - only errors pg raised for THIS attempt's queries are database failures ({@link TxAttempt.failureOf});
 * - a transaction ended by a COMMIT/ROLLBACK sent through `tx.query`, or a scope querying while a
 *   sibling's savepoint is open, is refused with {@link TxUsageError} and the attempt cannot commit;
 * - the client goes back to the pool only idle and healthy; on every other path it is destroyed.
 *
 * @example
 * const attempt = new TxAttempt(client, 1, settings, context);
 * const failed = await attempt.begin(beginSql(settings));
 */
export class TxAttempt {
  /** The one client this attempt runs on. */
  readonly client: pg.PoolClient;
  /** 1-based attempt number. */
  readonly number: number;
  /** Options of the outermost `do()`. */
  readonly settings: TxSettings;
  readonly #context: AttemptContext;
  /**
   * Errors pg raised for this attempt's queries (the only ones classified as database failures): made
   * at the first one (most attempts raise none; with the rules below, two allocations per transaction
   * fewer).
   */
  #driverErrors: WeakSet<object> | undefined;
  readonly #onError = (error: unknown): void => this.markBroken(error);
  #begunAt = 0;
  /**
   * BEGIN and its SET LOCALs, not sent yet: they go out with the attempt's first statement, in one
   * flight (see first-flight.ts), or with nothing at all when the callback sends nothing.
   */
  #opening: readonly string[] | undefined;
  /** The flight class of this client's pg (null: this client cannot write flights), once looked up. */
  #flight: FirstFlightClass | null | undefined;
  /** BEGIN (or a SET LOCAL) sent in the first flight failed: how the attempt ends, as a failed begin did. */
  #beginEnd: AttemptEnd | undefined;
  /** The error the first flight's statement was refused with when BEGIN failed (later queries get it too). */
  #beginError: unknown;
  /**
   * The first flight failed after BEGIN had run: the server's transaction is open (aborted), but pg
   * reports the error as soon as it arrives, and the ReadyForQuery that carries the status ('E') may
   * come in a later packet — until then the status still reads the 'I' from before BEGIN. Cleared
   * when a later query of the attempt settles (pg answers it after that ReadyForQuery).
   */
  #openBeforeStatus = false;
  #doom: TxKitError | undefined;
  #misuse: TxUsageError | undefined;
  #lastFailure: DatabaseFailure | undefined;
  /**
   * The last query of this attempt failed (no query has succeeded since): the server aborted the
   * transaction. Known when the error arrives — the transaction status ('E') is only read from the
   * ReadyForQuery message that follows it, which may not have been processed yet.
   */
  #lastQueryFailed = false;
  #connectionError: unknown;
  #broken = false;
  /** The server refused a write as read-only (25006): this client reaches a read-only server; destroy it. */
  #readOnlyServer = false;
  #closed = false;
  #released = false;
  #savepoints = 0;
  /** Scopes whose SAVEPOINT is open, innermost last. */
  readonly #open: AttemptScope[] = [];
  /** For each entry of {@link TxAttempt.#open}: the user's own savepoints set inside that scope. */
  readonly #userSavepoints: Set<string>[] = [];
  /** A query is in flight on the client; the next ones wait in {@link TxAttempt.#waiting}. */
  #busy = false;
  readonly #waiting: (() => void)[] = [];

  constructor(client: pg.PoolClient, number: number, settings: TxSettings, context: AttemptContext) {
    this.client = client;
    this.number = number;
    this.settings = settings;
    this.#context = context;
    // A checked-out client has no pool listener: without ours, a dropped connection would crash the process.
    client.on('error', this.#onError);
  }

  /** Set when something happened that forbids COMMIT; the outermost scope rolls back with this error. */
  get doom(): TxKitError | undefined {
    return this.#doom;
  }

  /** Dooms the attempt (first cause wins). */
  doomWith(failure: TxKitError): void {
    this.#doom ??= failure;
  }

  /** A misuse of the transaction (a defect): the attempt rolls back and `do()` rejects with it. */
  get misuse(): TxUsageError | undefined {
    return this.#misuse;
  }

  /** Is this kind retried by the outermost scope? */
  retries(kind: string): boolean {
    return (this.settings.retryOn as readonly string[]).includes(kind);
  }

  /** The connection broke (socket error, terminated backend, client-side query timeout). */
  get broken(): boolean {
    return this.#broken;
  }

  /** Records that the connection is gone (from the client's 'error' event or a failed query). */
  markBroken(error: unknown): void {
    if (!this.#broken) {
      this.#broken = true;
      this.#connectionError = error;
      if (typeof error === 'object' && error !== null) this.#driverError(error);
    }
  }

  /** Records an error pg raised for this attempt's queries. */
  #driverError(error: object): void {
    this.#driverErrors ??= new WeakSet();
    this.#driverErrors.add(error);
  }

  /** No more queries may run through this attempt's handles. */
  get closed(): boolean {
    return this.#closed;
  }

  /** A fresh savepoint name, unique within the attempt (generated, never from input). */
  nextSavepointName(): string {
    this.#savepoints += 1;
    return `pg_txkit_sp_${this.#savepoints}`;
  }

  /** Is the server's transaction aborted (a failed statement whose error the callback swallowed)? */
  get aborted(): boolean {
    return this.#openBeforeStatus || this.#context.statuses.of(this.client) === 'E';
  }

  /** What to report when the server says the transaction is aborted ('E'): the error that aborted it. */
  abortedFailure(): DatabaseFailure {
    return (
      this.#lastFailure ??
      new DbError(IN_FAILED_TRANSACTION, 'the transaction was aborted by an earlier error and cannot commit')
    );
  }

  /**
   * The database failure `error` stands for, when it is one — the transaction's rules for an error a
   * callback or a query threw, through the one classify-or-rethrow ({@link classifyOrRethrow}):
   * - pg-txkit's own database error, or (structurally) pg's DatabaseError;
   * - an error pg raised for this attempt's queries, found by identity, also when a query builder
   *   wrapped it: the `cause` chain is followed (at most 8 links, cycles stop it);
   * - an error that REPLACES pg's (a builder that converts it, as Prisma does, without a cause), when
   *   the transaction cannot commit because of the last driver error this attempt's queries raised:
   *   the last query failed and none has succeeded since (the server aborted the transaction; status
   *   'E'), or that error doomed it. That recorded error decides.
   * Anything else a callback throws — an HTTP client's ECONNRESET while the transaction is healthy, a
   * message that merely mentions a timeout, a plain object with a SQLSTATE-like `code`, a wrapper around
   * another connection's error — is not, and `undefined` comes back.
   */
  failureOf(error: unknown): DatabaseFailure | undefined {
    // A usage error is a defect, also when a query of this attempt threw it.
    if (error instanceof TxUsageError) return undefined;
    this.#rulesOrUndefined ??= { ...this.#classifyRules(), otherwise: () => undefined };
    return classifyOrRethrow(error, this.#rulesOrUndefined);
  }

  /**
   * {@link failureOf}, or `error` rethrown unchanged when it stands for no database failure: for the
   * manager's own statements inside the transaction (SAVEPOINT, RELEASE SAVEPOINT).
   */
  failureOrRethrow(error: unknown): DatabaseFailure {
    if (error instanceof TxUsageError) throw error;
    return classifyOrRethrow(error, this.#classifyRules());
  }

  /** The transaction's rules of the one classify-or-rethrow (see {@link failureOf}), made when first needed. */
  #rules: ClassifyRules<never> | undefined;
  /** {@link TxAttempt.#rules} for {@link failureOf}: no database failure is `undefined`, not a rethrow. */
  #rulesOrUndefined: ClassifyRules<undefined> | undefined;

  #classifyRules(): ClassifyRules<never> {
    this.#driverErrors ??= new WeakSet();
    this.#rules ??= {
      raisedByDriver: this.#driverErrors,
      replacing: () => {
        const recorded = this.#lastFailure;
        const doomed = this.#doom === recorded || this.#lastQueryFailed || this.aborted;
        return recorded !== undefined && doomed ? recorded : undefined;
      },
    };
    return this.#rules;
  }

  /** The failure that ended a broken connection (the server's reason when it gave one). */
  brokenFailure(): DatabaseFailure {
    const failure = classify(this.#connectionError);
    if (failure !== undefined && failure.kind !== 'DbError') return failure;
    return new ConnectionLost(undefined, this.#connectionError);
  }

  // --- lifecycle ---------------------------------------------------------------------------------

  /**
   * BEGIN and every SET LOCAL in one round trip (`text`: {@link beginSql} of the settings, built once
   * per settings by the manager). Returns how the attempt ended if BEGIN failed.
   */
  async begin(text: string): Promise<AttemptEnd | undefined> {
    this.#begunAt = performance.now();
    try {
      await this.#send([text]);
      return undefined;
    } catch (error) {
      const failure = this.failureOf(error);
      return failure === undefined ? { type: 'defect', error } : { type: 'failure', failure };
    }
  }

  /**
   * A query of a scope (`tx.query`): refused once the attempt is closed, doomed or misused, or when a
   * `nested` scope's savepoint is open that `scope` is not inside of; serialized with every other
   * query of the attempt; followed by a check that it did not end the transaction.
   */
  query<R extends pg.QueryResultRow>(scope: AttemptScope, args: QueryArgs): Promise<pg.QueryResult<R>> {
    const refusal = this.#refusal(scope, [args[0]]);
    if (refusal !== undefined) return Promise.reject(refusal);
    return this.#send<R>(args, true);
  }

  /**
   * A query of a scope with statements ahead of and behind it, in ONE round trip (see
   * first-flight.ts), refused and serialized as {@link TxAttempt.query} is — with BEGIN and its SET
   * LOCALs ahead of all of them when BEGIN is still deferred. Undefined, and nothing is sent, when this
   * client cannot write the flight (pg-native …) or the statement cannot travel in one: the caller
   * sends the statements one by one.
   */
  flight<R extends pg.QueryResultRow>(
    scope: AttemptScope,
    spec: FlightSpec,
  ): Promise<FlightOutcome<R>> | undefined {
    if (!fitsFirstFlight(spec.text, spec.values) || this.#flightClass() === undefined) return undefined;
    const texts = [...spec.opening, spec.text, ...spec.closing].map((s) =>
      typeof s === 'string' ? s : s.text,
    );
    const refusal = this.#refusal(scope, texts);
    if (refusal !== undefined) return Promise.resolve({ ok: false, part: 'opening', error: refusal });
    const around: Around = { opening: spec.opening, closing: spec.closing };
    return this.#send<R>([spec.text, spec.values], true, around).then(
      (result) => ({ ok: true, result }),
      (error: unknown) => ({ ok: false, part: around.failedPart ?? 'opening', error }),
    );
  }

  /**
   * Why a scope may not send these statements now (nothing is sent): the attempt is closed, doomed or
   * misused, or a `nested` scope's savepoint is open that `scope` is not inside of, or a statement
   * would end the transaction or break its savepoints.
   */
  #refusal(scope: AttemptScope, texts: readonly (string | pg.QueryConfig)[]): unknown {
    if (this.#closed) {
      return new TxUsageError(
        'transaction-closed',
        `the transaction${scope.name ? ` "${scope.name}"` : ''} has ended; a Tx must not be used after its callback returned`,
      );
    }
    if (this.#misuse) return this.#misuse;
    if (this.#beginEnd !== undefined) return this.#beginError;
    if (this.#doom) return this.#doom;
    const innermost = this.#open.at(-1);
    if (innermost !== undefined && !scope.within(innermost)) {
      return this.#misused(
        new TxUsageError(
          'concurrent-scope',
          'a query of one scope was sent while a concurrent nested scope of the same transaction had its ' +
            'SAVEPOINT open: it would have run inside that savepoint (and been rolled back with it). ' +
            'Await each scope of a transaction before starting the next one.',
        ),
      );
    }
    for (const text of texts) {
      const refused = this.#refuseControl(text);
      if (refused !== undefined) return this.#misused(refused);
    }
    return undefined;
  }

  /** The flight class of this client's pg, or undefined when it cannot write flights. */
  #flightClass(): FirstFlightClass | undefined {
    if (this.#flight === undefined) this.#flight = firstFlightClass(this.client) ?? null;
    return this.#flight ?? undefined;
  }

  /**
   * Defers BEGIN (`statements`: {@link beginStatements} of the settings) to the attempt's first
   * statement: both go to the server in ONE round trip (see first-flight.ts). Returns false, and
   * nothing is deferred, when this client's pg cannot write that flight: call {@link TxAttempt.begin}.
   * A callback that sends nothing sends nothing at all: no BEGIN, no COMMIT.
   */
  defer(statements: readonly string[]): boolean {
    if (this.#flightClass() === undefined) return false;
    this.#begunAt = performance.now();
    this.#opening = statements;
    return true;
  }

  /**
   * How the attempt ends when BEGIN, sent with the first statement, failed: exactly what
   * {@link TxAttempt.begin} would have returned. The outermost scope ends with it whatever its callback
   * did with the refused statement's error (nothing ran in the transaction; no ROLLBACK is sent).
   */
  get beginEnd(): AttemptEnd | undefined {
    return this.#beginEnd;
  }

  /**
   * {@link TxAttempt.begin} on a replica's client, bounded: no answer within `ms` (a replica that stops
   * answering: packets dropped, nothing refused) marks the connection broken and returns 'unanswered'
   * — nothing of the callback has run, and the caller sends the read to the primary. The client is
   * destroyed by {@link TxAttempt.release}.
   */
  async beginWithin(text: string, ms: number): Promise<AttemptEnd | undefined | 'unanswered'> {
    let timer: NodeJS.Timeout | undefined;
    const unanswered = new Promise<'unanswered'>((resolve) => {
      timer = setTimeout(() => resolve('unanswered'), ms);
    });
    try {
      const first = await Promise.race([this.begin(text), unanswered]);
      if (first === 'unanswered') {
        this.markBroken(new Error(`pg-txkit: the replica did not answer BEGIN within ${ms} ms`));
      }
      return first;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sends a statement of the manager itself (SAVEPOINT, RELEASE …), in order with the scopes' queries. */
  internal(text: string): Promise<unknown> {
    if (this.#beginEnd !== undefined) return Promise.reject(this.#beginError);
    return this.#send([text]);
  }

  /** A `nested` scope's SAVEPOINT is open: until {@link TxAttempt.closeSavepoint}, only it may query. */
  openSavepoint(owner: AttemptScope): void {
    this.#open.push(owner);
    this.#userSavepoints.push(new Set());
  }

  closeSavepoint(owner: AttemptScope): void {
    const at = this.#open.lastIndexOf(owner);
    if (at === -1) return;
    this.#open.splice(at, 1);
    this.#userSavepoints.splice(at, 1);
  }

  /** COMMIT (unless the attempt may not), release, hooks. Decides what a failed COMMIT means. */
  async commit(value: unknown, afterCommit: readonly AfterCommit[]): Promise<AttemptEnd> {
    this.#closed = true;
    let failure: TxKitError | undefined;
    if (this.#opening !== undefined) {
      // The callback sent nothing: BEGIN was never sent, so there is nothing to commit.
      this.#opening = undefined;
    } else if (this.#broken) {
      // The connection died before COMMIT was sent: the server rolled back; safe to retry.
      failure = this.brokenFailure();
    } else {
      try {
        // COMMIT: releases every lock of the transaction. SSI may still refuse it here with 40001.
        const result = (await this.#send(['COMMIT'])) as pg.QueryResult;
        // COMMIT of a transaction that had failed answers "ROLLBACK" without an error.
        if (result.command === 'ROLLBACK') failure = this.abortedFailure();
      } catch (error) {
        if (commitNotDelivered(error)) {
          this.markBroken(error);
          failure = new ConnectionLost(undefined, error);
        } else {
          const classified = this.failureOf(error);
          if (classified === undefined || classified.kind === 'ConnectionLost' || isConnectionError(error)) {
            // COMMIT was sent and the connection broke before the answer: it may or may not have committed.
            this.markBroken(error);
            failure = new CommitOutcomeUnknown(error);
          } else {
            // A server error answering COMMIT: per the retry mode, a conflict (retried) or an
            // ambiguous outcome (never retried).
            failure = commitFailure(classified, this.#context.retryMode);
          }
        }
      }
    }
    if (failure !== undefined) return this.rollback({ type: 'failure', failure });
    const durationMs = this.#held();
    this.release();
    this.#context.hooks.commit({ name: this.settings.name, attempt: this.number, durationMs });
    this.#reportSlow(durationMs);
    return { type: 'committed', value, afterCommit };
  }

  /**
   * ROLLBACK unless the connection is gone or the transaction already ended, then release and report.
   * A failed ROLLBACK never hides the original error: it is attached as the original's `cause` (when
   * it has none) and given to `onRollback` as `rollbackError`; the client is then destroyed.
   */
  async rollback(end: AttemptEnd): Promise<AttemptEnd> {
    this.#closed = true;
    // BEGIN never sent: the server has nothing to roll back (its status is 'I').
    this.#opening = undefined;
    let rollbackError: unknown;
    if (!this.#broken && (this.#openBeforeStatus || this.#context.statuses.of(this.client) !== 'I')) {
      try {
        // ROLLBACK: undoes everything and releases every lock of the transaction.
        await this.#send(['ROLLBACK']);
      } catch (error) {
        this.markBroken(error);
        rollbackError = error;
      }
    }
    const durationMs = this.#held();
    this.release();
    const error = end.type === 'failure' ? end.failure : end.type === 'committed' ? undefined : end.error;
    if (rollbackError !== undefined) attachCause(error, rollbackError);
    this.#context.hooks.rollback({
      name: this.settings.name,
      attempt: this.number,
      durationMs,
      error,
      ...(rollbackError === undefined ? {} : { rollbackError }),
    });
    this.#reportSlow(durationMs);
    return end;
  }

  /**
   * Returns the client, exactly once: to the pool when it is healthy and idle, else destroyed (a broken
   * connection, a transaction still open, a query still queued). Safe to call on every path.
   */
  release(): void {
    this.#closed = true;
    if (this.#released) return;
    this.#released = true;
    const client = this.client;
    let reason: Error | undefined;
    if (this.#broken) {
      reason =
        this.#connectionError instanceof Error
          ? this.#connectionError
          : new Error('pg-txkit: connection lost during the transaction');
    } else if (this.#openBeforeStatus || this.#context.statuses.of(client) !== 'I') {
      reason = new Error(
        'pg-txkit: client left inside a transaction; destroyed instead of returned to the pool',
      );
    }
    if (reason === undefined && this.#readOnlyServer) {
      // A pooled client that reached a read-only server (a standby behind a stale DNS answer) would
      // refuse the retry's writes again: the retry must get a new connection.
      reason = new Error('pg-txkit: the server refused a write as read-only (25006); connection discarded');
    }
    if (reason !== undefined) {
      // Keep our 'error' listener on a client being destroyed: a late socket error must not crash the process.
      client.release(reason);
      return;
    }
    client.removeListener('error', this.#onError);
    client.release();
  }

  // --- internals ---------------------------------------------------------------------------------

  /** Records a misuse (first wins) and returns the one to throw. */
  #misused(error: TxUsageError): TxUsageError {
    this.#misuse ??= error;
    return this.#misuse;
  }

  /**
   * Sends one query once every earlier one has settled (never two at once on the client), marks what
   * pg rejects it with as this attempt's driver error, and — for a scope's query — checks that it did
   * not end the transaction.
   */
  async #send<R extends pg.QueryResultRow>(
    args: QueryArgs,
    fromScope = false,
    around?: Around,
  ): Promise<pg.QueryResult<R>> {
    // Wait for the query in flight, if any (FIFO): it hands the client over when it settles.
    if (this.#busy) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    this.#busy = true;
    try {
      const opening = this.#opening;
      if (opening !== undefined) {
        this.#opening = undefined;
        if (fitsFirstFlight(args[0], args[1]))
          return await this.#flightNow<R>(opening, args, fromScope, around);
        // This statement cannot share the flight (see fitsFirstFlight): BEGIN goes on its own first.
        const failedBegin = await this.#sendBegin(opening);
        if (failedBegin !== undefined) {
          this.#beginEnd = failedBegin;
          this.#beginError = failedBegin.type === 'failure' ? failedBegin.failure : failedBegin.error;
          throw this.#beginError;
        }
      }
      if (around !== undefined) return await this.#flightNow<R>([], args, fromScope, around);
      return await this.#sendNow<R>(args, fromScope);
    } finally {
      this.#handOver();
    }
  }

  /** {@link TxAttempt.#send} once the client is ours and the transaction has begun. */
  async #sendNow<R extends pg.QueryResultRow>(
    args: QueryArgs,
    fromScope: boolean,
  ): Promise<pg.QueryResult<R>> {
    const [text, values] = args;
    try {
      const result =
        typeof text === 'string'
          ? await this.client.query<R>(text, values as unknown[] | undefined)
          : await this.client.query<R>(configOf(text, values));
      // Answered after the first flight's ReadyForQuery: the status is current again.
      this.#openBeforeStatus = false;
      this.#lastQueryFailed = false;
      if (fromScope) this.#checkStillInTransaction();
      return result;
    } catch (error) {
      this.#openBeforeStatus = false;
      const shown = this.#noteQueryError(error);
      if (fromScope) this.#checkStillInTransaction();
      throw shown;
    }
  }

  /** The query in flight has settled: the next waiting one gets the client. */
  #handOver(): void {
    const next = this.#waiting.shift();
    if (next === undefined) this.#busy = false;
    else next();
  }

  /** BEGIN on its own round trip, for a first statement that cannot share the flight. */
  async #sendBegin(
    opening: readonly string[],
  ): Promise<Extract<AttemptEnd, { type: 'failure' | 'defect' }> | undefined> {
    try {
      await this.client.query(opening.join('; '));
      this.#lastQueryFailed = false;
      return undefined;
    } catch (error) {
      const shown = this.#noteQueryError(error);
      const failure = this.failureOf(shown);
      return failure === undefined ? { type: 'defect', error: shown } : { type: 'failure', failure };
    }
  }

  /**
   * A flight: `begin` (BEGIN and its SET LOCALs when this is the attempt's first statement, else
   * nothing), the statements `around` it travels with, and this statement, in one round trip. The
   * statement's result and error are pg's own. When BEGIN (or a SET LOCAL) failed, nothing behind it
   * ran: the attempt records how it ends ({@link TxAttempt.beginEnd}) as a failed
   * {@link TxAttempt.begin} did, and the caller gets the error. `around.failedPart` tells where it failed.
   */
  async #flightNow<R extends pg.QueryResultRow>(
    begin: readonly string[],
    args: QueryArgs,
    fromScope: boolean,
    around: Around | undefined,
  ): Promise<pg.QueryResult<R>> {
    const Flight = this.#flightClass() as FirstFlightClass;
    const opening = around === undefined ? begin : [...begin, ...around.opening];
    let query: FirstFlightQuery;
    try {
      // A config object goes as a copy (see configOf): pg 8.11's Query writes into the object it gets.
      const [text, values] = args;
      query =
        typeof text === 'string'
          ? new Flight(opening, text, values, around?.closing)
          : new Flight(opening, configOf(text, values), undefined, around?.closing);
    } catch (error) {
      // Nothing was sent (pg refused the config): BEGIN still goes with the next statement, never skipped.
      if (begin.length > 0) this.#opening = begin;
      throw error;
    }
    try {
      // pg returns a Submittable as it was given: the flight itself, a promise of pg's own result.
      const result = (await this.client.query(query as unknown as pg.QueryConfig)) as pg.QueryResult<R>;
      this.#lastQueryFailed = false;
      this.#openBeforeStatus = false;
      if (fromScope) this.#checkStillInTransaction();
      return result;
    } catch (error) {
      const part = query.failedPart ?? 'opening';
      if (around !== undefined) around.failedPart = part;
      // Answered after any earlier flight's ReadyForQuery: the status is current again.
      if (begin.length === 0) this.#openBeforeStatus = false;
      // BEGIN ran unless it was the opening statement that failed (the ones after it: SET LOCAL). When
      // the status still reads the 'I' from before BEGIN, its ReadyForQuery has not been read yet.
      if (
        begin.length > 0 &&
        (part !== 'opening' || query.openingDone > 0) &&
        this.#context.statuses.of(this.client) === 'I'
      ) {
        this.#openBeforeStatus = true;
      }
      const shown = this.#noteQueryError(error);
      if (part === 'opening' && query.openingDone < begin.length) {
        const failure = this.failureOf(shown);
        this.#beginEnd =
          failure === undefined ? { type: 'defect', error: shown } : { type: 'failure', failure };
        this.#beginError = shown;
      }
      // No check that the statement left the transaction: a failed statement ends none.
      throw shown;
    }
  }

  /**
   * Refuses, before anything is sent, a query whose text holds a statement that would start or end the
   * transaction (see {@link controlStatements}), or a savepoint statement that would break the
   * manager's own savepoints: one naming them (`pg_txkit_sp_N`), or — inside a `nested` scope — a
   * RELEASE / ROLLBACK TO of a savepoint set before the scope's own (PostgreSQL would release or roll
   * back the scope's savepoint with it). The user's own SAVEPOINT / RELEASE / ROLLBACK TO are allowed
   * otherwise: they do not end the transaction.
   */
  #refuseControl(textOrConfig: string | pg.QueryConfig): TxUsageError | undefined {
    const text = sqlOf(textOrConfig);
    if (typeof text !== 'string') {
      if (typeof (textOrConfig as { submit?: unknown }).submit !== 'function') return undefined;
      // A submittable whose SQL cannot be read (a stream or cursor class of its own) could end the
      // transaction unseen: awaiting it returns before it has run, so not even the backstop sees it.
      return new TxUsageError(
        'transaction-control',
        'a submittable query whose SQL text cannot be read (neither .text nor .cursor.text) was sent through ' +
          'tx.query: it cannot be checked for COMMIT/ROLLBACK, so nothing was sent.',
      );
    }
    const statements = controlStatements(text);
    if (statements.length === 0) return undefined;
    const ownedHere = this.#userSavepoints.at(-1);
    const added: string[] = [];
    let refusal: TxUsageError | undefined;
    for (const statement of statements) {
      if (statement.type === 'control') {
        refusal = new TxUsageError(
          'transaction-control',
          `a statement sent through tx.query would end or start a transaction (${JSON.stringify(statement.statement)}); ` +
            'nothing was sent. The manager owns BEGIN/COMMIT/ROLLBACK: return a value to commit, return err(…) ' +
            "or throw to roll back; use propagation 'nested' for a savepoint.",
        );
        break;
      }
      if (statement.name.startsWith('pg_txkit_sp_')) {
        refusal = new TxUsageError(
          'transaction-control',
          `${JSON.stringify(statement.statement)} names a savepoint of the transaction manager (pg_txkit_sp_…); ` +
            'nothing was sent. Name your own savepoints otherwise.',
        );
        break;
      }
      if (statement.type === 'savepoint') {
        if (ownedHere !== undefined && !ownedHere.has(statement.name)) {
          ownedHere.add(statement.name);
          added.push(statement.name);
        }
      } else if (ownedHere !== undefined && !ownedHere.has(statement.name)) {
        refusal = new TxUsageError(
          'transaction-control',
          `${JSON.stringify(statement.statement)} inside a nested scope names a savepoint set outside it: it ` +
            "would also release or roll back the scope's own savepoint. Nothing was sent; return err(…) or " +
            'throw to roll the scope back.',
        );
        break;
      }
    }
    if (refusal !== undefined) for (const name of added) ownedHere?.delete(name);
    return refusal;
  }

  /**
   * A backstop: a statement a scope sent left the server outside any transaction. Every statement
   * PostgreSQL has that ends a transaction block is refused before it is sent, and none can run inside
   * another statement (a function cannot COMMIT; a procedure that COMMITs is refused by the server
   * inside a transaction block), so this reports a gap in that refusal if one ever shows up.
   */
  #checkStillInTransaction(): void {
    if (this.#broken || this.#closed) return;
    if (this.#openBeforeStatus || this.#context.statuses.of(this.client) !== 'I') return;
    throw this.#misused(
      new TxUsageError(
        'transaction-control',
        'a statement sent through tx.query ended the transaction although it was not recognised as ' +
          'transaction control before it was sent: the manager owns BEGIN/COMMIT/ROLLBACK. Return a value to commit, return err(…) or ' +
          "throw to roll back; use propagation 'nested' for a savepoint.",
      ),
    );
  }

  /**
   * Called with every error a query of this attempt threw. Records it as a driver error, marks a broken
   * connection, dooms the attempt on a serialization failure or a lost connection (no savepoint can make
   * those safe to commit), and returns the error the caller should see: the ORIGINAL failure instead of
   * PostgreSQL's "current transaction is aborted" (25P02) that follows it, and the server's reason
   * (25P03 …) instead of pg's "not queryable" when the connection had already been ended.
   */
  #noteQueryError(error: unknown): unknown {
    if (typeof error === 'object' && error !== null) this.#driverError(error);
    const failure = classify(error);
    // pg's own refusals before sending (a value it cannot serialize) leave the server's transaction as
    // it was: they must not make an earlier failure, recovered from by ROLLBACK TO SAVEPOINT, decide again.
    if (failure === undefined) return error;
    this.#lastQueryFailed = true;
    if (this.#broken && NOT_SENT.some((m) => (error as { message?: unknown }).message === m)) {
      const reason = this.brokenFailure();
      this.doomWith(reason);
      this.#driverError(reason);
      return reason;
    }
    if (failure.kind === 'ConnectionLost' || failure.kind === 'QueryTimeout' || isConnectionError(error)) {
      // A query_timeout leaves the statement running on the server: the client must never be reused.
      this.markBroken(error);
    }
    const code = (error as { code?: unknown }).code;
    if (code === IN_FAILED_TRANSACTION && this.#lastFailure !== undefined) {
      this.#driverError(this.#lastFailure);
      return this.#lastFailure;
    }
    this.#lastFailure = failure;
    if (failure.kind === 'ReadOnlyTransaction' && !this.settings.readOnly) this.#readOnlyServer = true;
    if (
      failure.kind === 'SerializationFailure' ||
      failure.kind === 'ConnectionLost' ||
      failure.kind === 'QueryTimeout' ||
      failure.kind === 'IdleInTransactionTimeout' ||
      failure.kind === 'ReadOnlyTransaction'
    ) {
      this.doomWith(failure);
    }
    return error;
  }

  #held(): number {
    return performance.now() - this.#begunAt;
  }

  #reportSlow(durationMs: number): void {
    if (durationMs >= this.#context.slowMs) {
      this.#context.hooks.slow({ name: this.settings.name, attempt: this.number, durationMs });
    }
  }
}

/**
 * The SQL text of a query: the string, a config's `text`, or a submittable's (pg-cursor keeps it on
 * `.text`, pg-query-stream on `.cursor.text`).
 */
function sqlOf(textOrConfig: string | pg.QueryConfig): string | undefined {
  if (typeof textOrConfig === 'string') return textOrConfig;
  const config = textOrConfig as { text?: unknown; cursor?: { text?: unknown } };
  if (typeof config.text === 'string') return config.text;
  const cursorText = config.cursor?.text;
  return typeof cursorText === 'string' ? cursorText : undefined;
}

/**
 * The config object pg is given for `tx.query(config, values?)`: a copy, with the values given beside
 * it (they win over the config's own, as in pg's merge; drizzle's node-postgres session sends its
 * queries this way) and no `callback`. Older pg (8.11 does) merged a call's values AND its callback into the
 * caller's own object, so a config once passed to `pool.query` kept that call's callback, and pg then
 * answered the next call through it instead of its promise (seen on pg 8.11: `tx.query` resolved to
 * undefined). A submittable (a cursor) is passed as it is.
 */
function configOf(config: pg.QueryConfig, values: readonly unknown[] | undefined): pg.QueryConfig {
  if (typeof (config as { submit?: unknown }).submit === 'function') return config;
  const { callback: _ignored, ...copy } = config as pg.QueryConfig & { callback?: unknown };
  return values === undefined ? copy : { ...copy, values: [...values] };
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
