import { err, errAsync, ok, type Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import { advisoryKey } from '../advisory/advisory-key.js';
import {
  IdempotencyConflict,
  InProgress,
  type InvalidOptions,
  SerializationFailure,
  type TxError,
} from '../errors/index.js';
import { spanSchema } from '../tx/duration.js';
import { isResult } from '../tx/is-result.js';
import { sendFlight } from '../tx/send-flight.js';
import type { ErrOf, OkOf, TxManager } from '../tx/tx-manager.js';
import type { ConstraintErrors } from '../tx/tx-manager-options.js';
import type { Tx } from '../tx/types.js';
import { parseOptions } from './parse-options.js';
import { derivedName, quoteName, tableNameSchema } from './sql-identifier.js';
import { decodeStoredResult, encodeStoredResult } from './stored-result.js';

const idempotencyKeysOptionsSchema = z
  .object({
    /** The keys table (created by migrate()), optionally schema-qualified. Default 'idempotency_keys'. */
    table: tableNameSchema.default('idempotency_keys'),
    /**
     * How long a key is remembered: a key older than this is treated as absent by run() (the work may run
     * again) and is what expire() deletes by default. Default '24h'.
     */
    ttl: spanSchema.default(86_400_000),
    /**
     * A duplicate that arrives while the first run's transaction is still open:
     * 'wait' (default) blocks until it commits (then replays its result) or rolls back (then runs);
     * 'fail' returns `InProgress` at once.
     */
    onConcurrent: z.enum(['wait', 'fail']).default('wait'),
  })
  .strict();

/** Options of {@link IdempotencyKeys}. */
export type IdempotencyKeysOptions = z.input<typeof idempotencyKeysOptionsSchema>;

/**
 * A text value PostgreSQL can store: `text` cannot hold NUL (U+0000), which would fail the INSERT with
 * 22021 inside the caller's transaction; refused up front instead (found by test/property/fuzz-patterns).
 */
const storableText = z
  .string()
  .min(1)
  .max(512)
  .refine((s) => !s.includes('\u0000'), 'must not contain NUL (U+0000): PostgreSQL text cannot store it');

const runInputSchema = z
  .object({
    key: storableText,
    /** A digest of the request (method, path, body…): the same key with another fingerprint is refused. */
    fingerprint: storableText.optional(),
  })
  .strict();

/** Options of {@link IdempotencyKeys.run}. */
export interface IdempotencyRunOptions {
  /** A digest of the request; a replay with a different fingerprint → `IdempotencyConflict`. */
  readonly fingerprint?: string;
}

/** What {@link IdempotencyKeys.run} returns. */
export interface IdempotentResult<T> {
  /**
   * What `fn` returned (first run) or its stored JSON (replay: dates come back as strings, BigInts as
   * BigInts). A result JSON cannot hold (a cycle) is `InvalidOptions` and the key is not kept.
   */
  readonly result: T;
  /** True when `fn` did not run because the key was already done. */
  readonly replayed: boolean;
}

/** The errors {@link IdempotencyKeys.run} adds to those of `fn` and of the transaction. */
export type IdempotencyError = IdempotencyConflict | InProgress | InvalidOptions;

/** How many times run() re-tries "insert the key, else read it" when the key row vanishes meanwhile. */
const MAX_ROUNDS = 3;

/**
 * "Do this at most once per request key": the idempotency-key pattern for payment requests, webhooks,
 * retried API calls. The key is a row under a primary key, inserted in the SAME transaction as the
 * work and updated with the work's JSON result before COMMIT — so the effect and the record of the
 * effect commit together or not at all (a lock is not idempotency: a row is).
 *
 * - First call: inserts the key, runs `fn(tx)`, stores its result → `{ result, replayed: false }`.
 * - Later calls with the key: `fn` is not called → `{ result: <stored JSON>, replayed: true }`.
 * - A concurrent duplicate (the first transaction still open): with `onConcurrent: 'wait'` it waits and
 *   then replays (or runs, if the first rolled back); with 'fail' it gets `InProgress` at once.
 * - Same key, different `fingerprint` → `IdempotencyConflict`.
 * - `fn` fails (Err or throw) → the key insert rolls back with the transaction, so a retry can run.
 *
 * How concurrent duplicates are detected: every run takes a transaction-scoped advisory lock on a
 * 64-bit sha-256 digest of (table, key) — `pg_advisory_xact_lock` ('wait') or
 * `pg_try_advisory_xact_lock` ('fail', a NOWAIT-style probe that does not abort the transaction, unlike
 * `lock_timeout`/NOWAIT errors). It is held until the transaction ends, exactly as long as the key's
 * uncommitted row; the unique key remains the guarantee (a digest collision only makes two keys wait
 * for each other).
 *
 * @example
 * const keys = new IdempotencyKeys(tm, { table: 'payment_requests' });
 * await keys.migrate();
 * const paid = await keys.run(idempotencyKey, async (tx) => {
 *   const { rows } = await tx.query<{ id: number }>('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [100]);
 *   return { paymentId: rows[0]?.id };
 * }, { fingerprint: sha256(req.body) });
 */
export class IdempotencyKeys<C extends Record<string, unknown> = Record<never, never>> {
  /** The keys table, as given. */
  readonly table: string;
  /** How long a key and its stored result are kept, in ms. */
  readonly ttlMs: number;
  /** A second caller with a key still running: waits for its result, or gets `InProgress`. */
  readonly onConcurrent: 'wait' | 'fail';
  readonly #tm: TxManager<C>;

  /** Throws `InvalidOptions` on bad options (a construction-time defect). */
  constructor(tm: TxManager<C>, options: IdempotencyKeysOptions = {}) {
    const parsed = parseOptions(idempotencyKeysOptionsSchema, options);
    if (parsed.isErr()) throw parsed.error;
    this.#tm = tm;
    this.table = parsed.value.table;
    this.ttlMs = parsed.value.ttl;
    this.onConcurrent = parsed.value.onConcurrent;
  }

  /**
   * Creates the keys table and its `created_at` index if they do not exist (safe to run concurrently:
   * an advisory transaction lock serializes it).
   *
   * Locks: CREATE TABLE/INDEX IF NOT EXISTS on an existing table takes SHARE on it briefly (blocks
   * writers while waiting): run it at deploy time, under the manager's lock_timeout.
   *
   * @example
   * await new IdempotencyKeys(tm, { table: 'payment_requests' }).migrate();
   */
  migrate(): ResultAsync<void, TxError | ConstraintErrors<C>> {
    const t = quoteName(this.table);
    const bare = this.table.split('.').pop() ?? this.table;
    return this.#tm
      .do(
        async (tx) => {
          // Advisory transaction lock: one migrate() at a time per table (concurrent CREATE … IF NOT EXISTS
          // can otherwise fail on the catalog's unique indexes).
          await tx.query('SELECT pg_advisory_xact_lock($1::bigint)', [digest(`migrate:${this.table}`)]);
          await tx.query(`CREATE TABLE IF NOT EXISTS ${t} (
            key text PRIMARY KEY,
            fingerprint text,
            status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done')),
            result jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            completed_at timestamptz
          )`);
          await tx.query(
            `CREATE INDEX IF NOT EXISTS ${quoteName(derivedName(bare, 'created_at_idx'))} ON ${t} (created_at)`,
          );
        },
        { propagation: 'requiresNew', name: 'IdempotencyKeys.migrate' },
      )
      .map(() => undefined) as ResultAsync<void, TxError | ConstraintErrors<C>>;
  }

  /**
   * Runs `fn` at most once for `key`, inside the caller's transaction (`tm.do` propagation 'required':
   * it joins the active transaction, or opens one), and stores its JSON result with the key.
   * `fn(tx)` may return a value or a neverthrow Result; an `Err` (or a throw) rolls the key back with
   * the transaction.
   *
   * Locks: a transaction-scoped advisory lock on the key's digest (see the class comment); the key row
   * INSERT … ON CONFLICT DO NOTHING (ROW EXCLUSIVE); the result UPDATE locks the key row (NO KEY
   * UPDATE). All held until the transaction ends.
   *
   * @example
   * const r = await keys.run('req-42', (tx) => chargeCard(tx, 100), { fingerprint: 'sha256:…' });
   * if (r.isOk() && r.value.replayed) console.log('already charged', r.value.result);
   */
  run<R>(
    key: string,
    fn: (tx: Tx) => R,
    options: IdempotencyRunOptions = {},
  ): ResultAsync<
    IdempotentResult<OkOf<Awaited<R>>>,
    ErrOf<Awaited<R>> | IdempotencyError | TxError | ConstraintErrors<C>
  > {
    type Out = ResultAsync<
      IdempotentResult<OkOf<Awaited<R>>>,
      ErrOf<Awaited<R>> | IdempotencyError | TxError | ConstraintErrors<C>
    >;
    const parsed = parseOptions(runInputSchema, { key, ...options });
    if (parsed.isErr()) return errAsync(parsed.error) as Out;
    const fingerprint = parsed.value.fingerprint ?? null;
    const t = quoteName(this.table);
    const lockKey = digest(`key:${this.table}:${key}`);
    // ROW EXCLUSIVE on the table; the primary key makes the key unique across all callers.
    const insertSql = `INSERT INTO ${t} (key, fingerprint) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING key`;
    const body = async (tx: Tx): Promise<Result<IdempotentResult<unknown>, unknown>> => {
      let locked = false;
      if (this.onConcurrent === 'fail') {
        // NOWAIT-style probe: false (not an error) when another transaction runs this key right now.
        const probe = await tx.query<{ got: boolean }>(
          'SELECT pg_try_advisory_xact_lock($1::bigint) AS got',
          [lockKey],
        );
        if (probe.rows[0]?.got !== true) return err(new InProgress(key));
        locked = true;
      }
      for (let round = 1; round <= MAX_ROUNDS; round++) {
        let inserted: pg.QueryResult;
        if (locked) {
          inserted = await tx.query(insertSql, [key, fingerprint]);
        } else {
          // Waits while another transaction runs this key (released at our COMMIT/ROLLBACK), then the
          // INSERT, in ONE round trip (with BEGIN too when it opens the transaction; see sendFlight):
          // the INSERT runs only once the lock is held, as a statement of its own (its own snapshot).
          const sent = await sendFlight(tx, {
            opening: [{ text: 'SELECT pg_advisory_xact_lock($1::bigint)', values: [lockKey] }],
            text: insertSql,
            values: [key, fingerprint],
            closing: [],
          });
          if (!sent.ok) throw sent.error;
          inserted = sent.result;
          locked = true;
        }
        if ((inserted.rowCount ?? 0) === 1) return this.#runFirst(tx, key, fn);
        // Plain read of the committed key (we hold its advisory lock, so it is not changing).
        const found = await tx.query<{
          fingerprint: string | null;
          status: string;
          result: unknown;
          expired: boolean;
        }>(
          `SELECT fingerprint, status, result, created_at < now() - make_interval(secs => $2::double precision / 1000) AS expired
             FROM ${t} WHERE key = $1`,
          [key, this.ttlMs],
        );
        const row = found.rows[0];
        if (row === undefined) continue; // expired and deleted by someone meanwhile: insert again
        if (row.expired) {
          // Locks the expired key row (FOR UPDATE, a DELETE) and forgets it: the work may run again.
          await tx.query(`DELETE FROM ${t} WHERE key = $1`, [key]);
          continue;
        }
        if (fingerprint !== null && row.fingerprint !== fingerprint) return err(new IdempotencyConflict(key));
        // 'running' can only be our own transaction's row: run(key) called again inside its own fn.
        if (row.status !== 'done') return err(new InProgress(key));
        return ok({ result: decodeStoredResult(row.result), replayed: true });
      }
      throw new SerializationFailure(); // the key kept vanishing: retry the transaction
    };
    return this.#tm.do(body, { propagation: 'required' }) as unknown as Out;
  }

  /** First run of a key: call fn, store its result; on failure remove the key so the transaction stays clean. */
  async #runFirst<R>(
    tx: Tx,
    key: string,
    fn: (tx: Tx) => R,
  ): Promise<Result<IdempotentResult<unknown>, unknown>> {
    const forget = async () => {
      // If the caller swallows the failure and commits, the key must not survive without a result.
      // (Fails harmlessly when the transaction is already aborted: then nothing commits anyway.)
      await tx.query(`DELETE FROM ${quoteName(this.table)} WHERE key = $1`, [key]).catch(() => {});
    };
    let returned: unknown;
    try {
      returned = await fn(tx);
    } catch (error) {
      await forget();
      throw error;
    }
    let value: unknown = returned;
    if (isResult(returned)) {
      if (returned.isErr()) {
        await forget();
        return err(returned.error);
      }
      value = returned._unsafeUnwrap();
    }
    const json = encodeStoredResult(value);
    if (json.isErr()) {
      await forget();
      return err(json.error);
    }
    // Locks the key row we inserted (FOR NO KEY UPDATE); same transaction as the work.
    await tx.query(
      `UPDATE ${quoteName(this.table)} SET status = 'done', result = $2::jsonb, completed_at = now() WHERE key = $1`,
      [key, json.value],
    );
    return ok({ result: value, replayed: false });
  }

  /**
   * Deletes keys older than `olderThan` (default: the ttl), in batches of 1000 that skip rows locked by
   * running transactions. Resolves to the number deleted.
   *
   * Lock: FOR UPDATE SKIP LOCKED on each batch of old key rows, then DELETE; autocommit per batch.
   *
   * @example
   * await keys.expire('7d');
   */
  expire(olderThan?: number | string): ResultAsync<number, InvalidOptions | TxError | ConstraintErrors<C>> {
    const parsed = parseOptions(spanSchema.optional(), olderThan);
    if (parsed.isErr()) return errAsync(parsed.error);
    const ms = parsed.value ?? this.ttlMs;
    const t = quoteName(this.table);
    const batch = () =>
      this.#tm.do(
        async (tx) => {
          const r = await tx.query(
            `DELETE FROM ${t} WHERE key IN (
               SELECT key FROM ${t} WHERE created_at < now() - make_interval(secs => $1::double precision / 1000)
               LIMIT 1000 FOR UPDATE SKIP LOCKED)`,
            [ms],
          );
          return r.rowCount ?? 0;
        },
        { propagation: 'requiresNew', name: 'IdempotencyKeys.expire' },
      );
    const loop = async (): Promise<Result<number, TxError | ConstraintErrors<C>>> => {
      let total = 0;
      for (let n = 0; n < 100_000; n++) {
        const r = await batch();
        if (r.isErr()) return err(r.error as TxError | ConstraintErrors<C>);
        total += r.value;
        if (r.value < 1000) break;
      }
      return ok(total);
    };
    return new ResultAsync(loop());
  }
}

/**
 * Signed 64-bit advisory key of a text: `advisoryKey('pg-txkit', 'idempotency:<text>')` (sha-256, stable
 * across processes; never hashtext) — the same value as in earlier versions.
 */
function digest(text: string): string {
  return advisoryKey('pg-txkit', `idempotency:${text}`).toString();
}
