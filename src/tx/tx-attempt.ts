import type pg from 'pg';
import {
  classify,
  type DatabaseFailure,
  DbError,
  isConnectionError,
  type TxKitError,
} from '../errors/index.js';
import type { TxSettings } from './tx-options.js';

/** SQLSTATE 25P02 in_failed_sql_transaction: "current transaction is aborted, commands ignored …". */
const IN_FAILED_TRANSACTION = '25P02';

/**
 * The state of ONE attempt of an outermost transaction: its pinned client, whether it is doomed (it
 * must not commit), the last database failure seen, and whether its connection broke. Shared by
 * every scope (`required` joins, `nested` savepoints) of that attempt. Internal to the manager.
 */
export class TxAttempt {
  /** The one client this attempt runs on, checked out for the whole attempt. */
  readonly client: pg.PoolClient;
  /** 1-based attempt number. */
  readonly number: number;
  /** Options of the outermost `do()`. */
  readonly settings: TxSettings;
  readonly #retryOn: ReadonlySet<string>;
  #doom: TxKitError | undefined;
  #lastFailure: DatabaseFailure | undefined;
  #connectionError: unknown;
  #broken = false;
  #closed = false;
  #savepoints = 0;

  constructor(client: pg.PoolClient, number: number, settings: TxSettings) {
    this.client = client;
    this.number = number;
    this.settings = settings;
    this.#retryOn = new Set(settings.retryOn);
  }

  /** Set when something happened that forbids COMMIT; the outermost scope rolls back with this error. */
  get doom(): TxKitError | undefined {
    return this.#doom;
  }

  /** Dooms the attempt (first cause wins). */
  doomWith(failure: TxKitError): void {
    this.#doom ??= failure;
  }

  /** Is this kind retried by the outermost scope? */
  retries(kind: string): boolean {
    return this.#retryOn.has(kind);
  }

  /** The connection broke (socket error, terminated backend). */
  get broken(): boolean {
    return this.#broken;
  }

  /** The error that broke the connection, if any. */
  get connectionError(): unknown {
    return this.#connectionError;
  }

  /** Records that the connection is gone (from the client's 'error' event or a failed query). */
  markBroken(error: unknown): void {
    if (!this.#broken) {
      this.#broken = true;
      this.#connectionError = error;
    }
  }

  /** No more queries may run through this attempt's handles. */
  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    this.#closed = true;
  }

  /** A fresh savepoint name, unique within the attempt (generated, never from input). */
  nextSavepointName(): string {
    this.#savepoints += 1;
    return `pg_txkit_sp_${this.#savepoints}`;
  }

  /** What to report when the server says the transaction is aborted ('E'): the error that aborted it. */
  abortedFailure(): DatabaseFailure {
    return (
      this.#lastFailure ??
      new DbError(IN_FAILED_TRANSACTION, 'the transaction was aborted by an earlier error and cannot commit')
    );
  }

  /**
   * Called with every error a query of this attempt threw. Records it, marks a broken connection,
   * dooms the attempt on a serialization failure or a lost connection (no savepoint can make those
   * safe to commit), and returns the error the caller should see: the ORIGINAL failure instead of
   * PostgreSQL's "current transaction is aborted" (25P02) that follows it.
   */
  noteQueryError(error: unknown): unknown {
    const failure = classify(error);
    if (failure === undefined) return error;
    if (failure.kind === 'ConnectionLost' || isConnectionError(error)) this.markBroken(error);
    const code = (error as { code?: unknown }).code;
    if (code === IN_FAILED_TRANSACTION && this.#lastFailure !== undefined) return this.#lastFailure;
    this.#lastFailure = failure;
    if (failure.kind === 'SerializationFailure' || failure.kind === 'ConnectionLost') this.doomWith(failure);
    return error;
  }
}
