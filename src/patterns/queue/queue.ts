import { err, errAsync, ok, okAsync, type Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import type { z } from 'zod/v4';
import { classify } from '../../errors/classify.js';
import {
  type DatabaseFailure,
  InvalidOptions,
  LeaseLost,
  NotFound,
  type TxKitError,
  UnknownTask,
} from '../../errors/errors.js';
import { guardClientErrors } from '../../tx/guard-client-errors.js';
import type { Db, Queryable } from '../../tx/types.js';
import { errorText } from './error-text.js';
import {
  type EnqueuedJob,
  type Job,
  type JobLease,
  type JobState,
  type JobTuple,
  jobFromTuple,
  RAW_TEXT,
} from './job.js';
import type {
  CompleteManyResult,
  FailItem,
  FailResult,
  JobStore,
  QueueTxManager,
  ReapResult,
  TaskMap,
} from './job-store.js';
import { type MigrateResult, migrateQueue, notifyChannel } from './migrate-queue.js';
import { type PayloadInput, type PayloadSchema, validatePayload } from './payload-schema.js';
import {
  claimOptionsSchema,
  enqueueManyOptionsSchema,
  enqueueOptionsSchema,
  failOptionsSchema,
  parseOptions,
  queueOptionsSchema,
  reapOptionsSchema,
  redriveOptionsSchema,
} from './queue-options.js';
import { type QueueStatements, queueStatements } from './queue-sql.js';
import { invalidLease, isJobId, leaseArrays, splitLeases } from './split-leases.js';
import type { WorkHandlers, WorkOptionsInput } from './work-options.js';
import { QueueWorker } from './worker.js';

export type { CompleteManyResult, FailItem, FailResult, QueueTxManager, ReapResult, TaskMap };

/** Options of {@link Queue} (see `queueOptionsSchema` for every field). */
export type QueueOptions<T extends TaskMap> = Omit<
  z.input<typeof queueOptionsSchema>,
  'tasks' | 'txManager'
> & {
  readonly tasks: T;
  readonly txManager: QueueTxManager;
};
/** Options of {@link Queue.enqueue}. */
export type EnqueueOptions = z.input<typeof enqueueOptionsSchema>;
/** Options of {@link Queue.enqueueMany}. */
export type EnqueueManyOptions = z.input<typeof enqueueManyOptionsSchema>;
/** Options of {@link Queue.claim}. */
export type ClaimOptions = z.input<typeof claimOptionsSchema>;
/** Options of {@link Queue.fail}. */
export type FailOptions = z.input<typeof failOptionsSchema>;
/** Options of {@link Queue.redrive}. */
export type RedriveOptions = z.input<typeof redriveOptionsSchema>;
/** Options of {@link Queue.reap}. */
export type ReapOptions = z.input<typeof reapOptionsSchema>;

/** What enqueue can fail with. */
export type EnqueueError = UnknownTask | InvalidOptions | NotFound | DatabaseFailure;
/** What a settle (complete, fail, extend) can fail with. */
export type SettleError = LeaseLost | InvalidOptions | DatabaseFailure;

/** Result of {@link Queue.enqueueMany}. */
export interface EnqueueManyResult {
  /** Ids of the jobs inserted, in payload order. */
  readonly ids: readonly string[];
  /** Payloads skipped because a live job already had their key. */
  readonly skipped: number;
}

/** What {@link Queue.stats} reports. */
export interface QueueStats {
  /** Pending jobs (including those scheduled in the future). */
  readonly pending: number;
  /** Pending jobs that could run now. */
  readonly ready: number;
  /** Running (leased) jobs. */
  readonly running: number;
  /** Running jobs whose lease has expired (the reaper's work; 0 in a healthy queue). */
  readonly expired: number;
  /** Dead jobs (attempts used up), waiting for redrive or cancel. */
  readonly dead: number;
  /** Age in ms of the oldest job that could run now (0 when none): the queue's lag. */
  readonly oldestReadyMs: number;
  /** Dead tuples of the jobs table (pg_stat_user_tables, approximate): vacuum backlog. */
  readonly deadTuples: number;
  /** Live tuples of the jobs table (approximate). */
  readonly liveTuples: number;
}

/** Maps a driver error to the taxonomy; anything that is not a database failure is a defect: rethrown. */
function dbError(e: unknown): DatabaseFailure {
  const failure = classify(e);
  if (failure === undefined) throw e;
  return failure as DatabaseFailure;
}

function run<R extends pg.QueryResultRow>(
  db: Db,
  text: string,
  values: readonly unknown[],
): ResultAsync<pg.QueryResult<R>, DatabaseFailure> {
  return ResultAsync.fromPromise((db as Queryable).query<R>(text, values), dbError);
}

/** ',' */
const COMMA = 44;
/** Splits a completion's jobs into those completed (ids in `done`) and those whose lease was lost. */
function partitionCompleted(jobs: readonly JobLease[], done: ReadonlySet<string>) {
  const completed: string[] = [];
  const lost: string[] = [];
  for (const j of jobs) (done.has(j.id) ? completed : lost).push(j.id);
  return { completed, lost };
}

const ENQUEUE_RACE_RETRIES = 5;
const REDRIVE_RACE_RETRIES = 5;

/**
 * A JSON text (from JSON.stringify) holding an escape jsonb refuses: NUL (`\u0000`, 22P05) or a lone
 * surrogate (`\ud800`, 22P02; JSON.stringify escapes only unpaired surrogates). An escape preceded by
 * an escaped backslash (`\\u0000`) is plain text and does not count.
 */
const NUL_IN_JSON = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/**
 * A job queue in PostgreSQL on `FOR UPDATE SKIP LOCKED`, with leases fenced by a per-claim token.
 *
 * - `enqueue(db, …)` inside your transaction is a transactional outbox: the job exists iff the
 *   business transaction commits; workers are woken by a NOTIFY delivered at COMMIT.
 * - `claim` takes a batch in one statement, counts the attempt and gives a lease (token + expiry).
 * - `complete`/`fail`/`extend` are fenced by id + token + state: a worker that lost its lease
 *   (expired and re-queued by `reap`, re-claimed, cancelled) gets `LeaseLost` and changes nothing.
 * - `work(handlers)` runs a worker: batched claims and settles, LISTEN wake-up with a polling
 *   backstop, heartbeats, the reaper, handler timeouts and a two-phase graceful stop.
 *
 * @example
 * const queue = new Queue({ pool, txManager: tm, tasks: { email: z.object({ to: z.string() }) } });
 * await queue.migrate();
 * await tm.do(async (tx) => {
 *   await tx.query('INSERT INTO users (email) VALUES ($1)', ['a@example.com']);
 *   return queue.enqueue(tx, 'email', { to: 'a@example.com' }); // commits with the user, or not at all
 * });
 * const worker = queue.work({ email: async (job) => sendMail(job.payload.to) }, { concurrency: 8 });
 * await worker.stop();
 */
export class Queue<T extends TaskMap = TaskMap> implements JobStore {
  /** The pool the queue's own statements run on. */
  readonly pool: pg.Pool;
  /** The TxManager that runs handler transactions. */
  readonly txManager: QueueTxManager;
  /** The schema of the queue's tables. */
  readonly schema: string;
  /** The NOTIFY channel workers LISTEN on. */
  readonly channel: string;
  /** Registered task names. */
  readonly taskNames: readonly string[];
  /** Default lease in ms. */
  readonly leaseMs: number;
  readonly #tasks: T;
  readonly #sql: QueueStatements;
  readonly #maxAttempts: number;
  readonly #backoff: { readonly baseMs: number; readonly capMs: number };

  /**
   * Creates a queue handle (sends nothing to the database; call {@link Queue.migrate} once at start-up).
   * Throws {@link InvalidOptions} on invalid options: a configuration error is a defect.
   *
   * @example
   * const queue = new Queue({ pool, txManager: tm, schema: 'jobs', tasks: { resize: z.object({ url: z.url() }) } });
   */
  constructor(options: QueueOptions<T>) {
    const parsed = parseOptions(queueOptionsSchema, options);
    if (parsed.isErr()) throw parsed.error;
    const o = parsed.value;
    this.pool = o.pool;
    // Reliability fix: a connection error racing pool.connect() must not crash the worker process
    // (see guard-client-errors.ts).
    guardClientErrors(o.pool);
    this.txManager = options.txManager;
    this.schema = o.schema;
    this.channel = notifyChannel(o.schema);
    this.#tasks = options.tasks;
    this.taskNames = Object.freeze(Object.keys(options.tasks));
    this.leaseMs = o.lease;
    this.#maxAttempts = o.maxAttempts;
    this.#backoff = o.backoff;
    this.#sql = queueStatements(o.schema, { archive: o.archive, channel: this.channel });
  }

  /**
   * Creates or upgrades the queue's schema (numbered migrations, once each, under a transaction-scoped
   * advisory lock: safe when many replicas start at once).
   *
   * @example
   * const migrated = await queue.migrate();
   * if (migrated.isErr()) throw migrated.error;
   */
  migrate(): ResultAsync<MigrateResult, TxKitError> {
    return migrateQueue(this.pool, this.schema);
  }

  #validate<K extends keyof T & string>(
    task: K,
    payload: unknown,
  ): Result<unknown, UnknownTask | InvalidOptions> {
    if (!Object.hasOwn(this.#tasks, task)) return err(new UnknownTask(task));
    const parsed = validatePayload(this.#tasks[task] as PayloadSchema, payload);
    if (parsed.isOk()) {
      // The payload is stored as jsonb: it must serialize (a BigInt made JSON.stringify throw a
      // TypeError out of enqueue; undefined or a function serialize to nothing) and hold no U+0000
      // ("\u0000", which jsonb refuses with 22P05 after validation passed). Both refused here, before
      // SQL, like any invalid payload (found by test/property/fuzz-queue).
      let json: string | undefined;
      try {
        json = JSON.stringify(parsed.value);
      } catch (error) {
        return err(invalidPayload(`the payload is not JSON-serializable (${errorText(error)})`));
      }
      if (json === undefined) return err(invalidPayload('the payload is not JSON-serializable'));
      if (NUL_IN_JSON.test(json)) {
        return err(
          invalidPayload(
            'a string in the payload holds NUL (U+0000) or a lone surrogate, which jsonb cannot store',
          ),
        );
      }
      return ok(parsed.value);
    }
    return err(parsed.error);
  }

  /**
   * Adds a job. Pass your transaction as `db` to make it part of the business transaction (the job
   * exists iff it commits: a transactional outbox), or the pool for a standalone insert. The payload
   * is validated by the task's schema first: `UnknownTask` or `InvalidOptions` and nothing inserted.
   * With `key`, a live (pending or running) job of the task with the same key is returned instead of
   * inserting a duplicate (`created: false`).
   *
   * @example
   * const job = await queue.enqueue(tx, 'email', { to: 'a@example.com' }, { key: 'welcome:42', priority: -1 });
   * if (job.isOk() && !job.value.created) console.log('already queued', job.value.id);
   */
  enqueue<K extends keyof T & string>(
    db: Db,
    task: K,
    payload: PayloadInput<T[K]>,
    options: EnqueueOptions = {},
  ): ResultAsync<EnqueuedJob, EnqueueError> {
    const checked = this.#validate(task, payload).andThen((value) =>
      parseOptions(enqueueOptionsSchema, options).map((o) => ({ value, o })),
    );
    if (checked.isErr()) return errAsync(checked.error);
    const { value, o } = checked.value;
    const backoff = o.backoff ?? this.#backoff;
    const params = [
      task,
      JSON.stringify(value),
      o.priority,
      o.runAt ?? null,
      o.maxAttempts ?? this.#maxAttempts,
      backoff.baseMs,
      backoff.capMs,
      o.key ?? null,
    ];
    type Row = {
      id: string;
      task: string;
      state: JobState;
      run_at: Date;
      key: string | null;
      created: boolean;
    };
    const attempt = (left: number): ResultAsync<EnqueuedJob, EnqueueError> =>
      run<Row>(db, this.#sql.enqueue, params).andThen((res) => {
        const row = res.rows[0];
        if (row === undefined) {
          // The keyed job that blocked the insert committed after this statement's snapshot (or ended
          // meanwhile): run again with a fresh snapshot. Bounded.
          if (left > 0) return attempt(left - 1);
          return errAsync(new NotFound(`${this.schema}.jobs`, [o.key]));
        }
        return ok<EnqueuedJob, EnqueueError>({
          id: String(row.id),
          task: row.task,
          state: row.state,
          runAt: row.run_at,
          key: row.key,
          created: row.created,
        });
      });
    return attempt(ENQUEUE_RACE_RETRIES);
  }

  /**
   * Adds many jobs of one task in ONE statement (unnest), with one NOTIFY: thousands per round trip.
   * Every payload is validated first; one invalid payload fails the whole call and inserts nothing.
   *
   * @example
   * const r = await queue.enqueueMany(pool, 'email', users.map((u) => ({ to: u.email })));
   * if (r.isOk()) console.log(r.value.ids.length);
   */
  enqueueMany<K extends keyof T & string>(
    db: Db,
    task: K,
    payloads: readonly PayloadInput<T[K]>[],
    options: EnqueueManyOptions = {},
  ): ResultAsync<EnqueueManyResult, EnqueueError> {
    // A non-array (a type error the compiler catches) threw a TypeError from payloads.entries() (found by
    // test/property/fuzz-queue): refused as InvalidOptions instead.
    if (!Array.isArray(payloads)) {
      return errAsync(new InvalidOptions([{ path: ['payloads'], message: 'payloads must be an array' }]));
    }
    const parsedOptions = parseOptions(enqueueManyOptionsSchema, options);
    if (parsedOptions.isErr()) return errAsync(parsedOptions.error);
    const o = parsedOptions.value;
    if (o.keys !== undefined && o.keys.length !== payloads.length) {
      return errAsync(
        new InvalidOptions([{ path: ['keys'], message: 'needs one key (or null) per payload' }]),
      );
    }
    const values: string[] = [];
    for (const [index, payload] of payloads.entries()) {
      const v = this.#validate(task, payload);
      if (v.isErr()) {
        const e = v.error;
        if (e.kind === 'UnknownTask') return errAsync(e);
        return errAsync(
          new InvalidOptions(
            e.issues.map((i) => ({ ...i, path: [index, ...i.path] })),
            e.cause,
          ),
        );
      }
      values.push(JSON.stringify(v.value));
    }
    if (values.length === 0) return ResultAsync.fromSafePromise(Promise.resolve({ ids: [], skipped: 0 }));
    const backoff = o.backoff ?? this.#backoff;
    return run<{ id: string }>(db, this.#sql.enqueueMany, [
      task,
      values,
      o.priority,
      o.runAt ?? null,
      o.maxAttempts ?? this.#maxAttempts,
      backoff.baseMs,
      backoff.capMs,
      o.keys ?? values.map(() => null),
    ]).map((res) => ({ ids: res.rows.map((r) => String(r.id)), skipped: values.length - res.rows.length }));
  }

  /**
   * Claims up to `batch` runnable jobs in one statement (MATERIALIZED CTE with FOR UPDATE SKIP
   * LOCKED, then UPDATE … RETURNING): each gets `attempts + 1`, a fresh lease token and a lease expiry.
   * Run them, then `complete` or `fail` each before the lease expires (or `extend` it).
   *
   * @example
   * const jobs = await queue.claim({ batch: 10, lease: '1m' });
   */
  claim(options: ClaimOptions = {}): ResultAsync<Job[], InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(claimOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    const o = parsed.value;
    const query = this.pool.query<JobTuple>({
      text: this.#sql.claim,
      values: [o.batch, o.lease ?? this.leaseMs, o.tasks ?? this.taskNames],
      rowMode: 'array',
      types: RAW_TEXT,
    });
    return ResultAsync.fromPromise(query, dbError).map((res) => res.rows.map(jobFromTuple));
  }

  /**
   * Completes a job (deletes it, or archives it). Fenced by id + lease token + running state: if the
   * lease was lost meanwhile, `LeaseLost` and nothing changes. Pass a transaction as `db` to commit
   * the completion together with the handler's own writes (exactly-once database effects).
   *
   * @example
   * const done = await queue.complete(job);
   * if (done.isErr() && done.error.kind === 'LeaseLost') console.log('someone else owns it now');
   */
  complete(job: JobLease, db: Db = this.pool): ResultAsync<void, SettleError> {
    const invalid = invalidLease(job);
    if (invalid !== undefined) return errAsync(invalid);
    return this.completeMany([job], db).andThen((r) =>
      r.lost.length > 0 ? err(new LeaseLost(job.id)) : ok(undefined),
    );
  }

  /**
   * Completes many jobs in ONE statement; reports which ones were completed, which had lost their
   * lease, and which had a malformed id or lease token (each with its own InvalidOptions; the others
   * are completed all the same).
   *
   * @example
   * const r = await queue.completeMany(jobs);
   * if (r.isOk()) console.log(r.value.completed.length, r.value.lost.length, r.value.invalid.length);
   */
  completeMany(
    jobs: readonly JobLease[],
    db: Db = this.pool,
  ): ResultAsync<CompleteManyResult, DatabaseFailure> {
    const { valid, invalid } = splitLeases(jobs, (j) => j);
    if (valid.length === 0) return okAsync({ completed: [], lost: [], invalid });
    return run<{ ids: string[] }>(db, this.#sql.complete, leaseArrays(valid)).map((res) => ({
      ...partitionCompleted(valid, new Set(res.rows[0]?.ids)),
      invalid,
    }));
  }

  /**
   * Completes jobs this queue's own claim returned (a worker's, on the pool): their ids and lease tokens
   * are well-formed by construction, so they are not checked again as a user's are in completeMany.
   *
   * @example
   * const jobs = await queue.claim({ batch: 50 });
   * if (jobs.isOk()) await queue.completeClaimed(jobs.value);
   */
  completeClaimed(jobs: readonly JobLease[]): ResultAsync<CompleteManyResult, DatabaseFailure> {
    if (jobs.length === 0) return okAsync({ completed: [], lost: [], invalid: [] });
    const query = this.pool.query<[string]>({
      text: this.#sql.complete,
      values: leaseArrays(jobs),
      rowMode: 'array',
      types: RAW_TEXT,
    });
    return ResultAsync.fromPromise(query, dbError).map((res) => {
      // The completed ids as one array literal of digits ('{1,2,3}'): when it holds as many ids as were
      // sent (the usual case), all of them were completed, and it need not be parsed.
      const ids = res.rows[0]?.[0] ?? '{}';
      let count = ids === '{}' ? 0 : 1;
      for (let i = 0; i < ids.length; i++) if (ids.charCodeAt(i) === COMMA) count++;
      if (count === jobs.length) return { completed: jobs.map((j) => j.id), lost: [], invalid: [] };
      return { ...partitionCompleted(jobs, new Set(ids.slice(1, -1).split(','))), invalid: [] };
    });
  }

  /**
   * Records a failed attempt: the job goes back to pending after its backoff (exponential, full
   * jitter, capped) or after `retryIn`, or becomes dead when its attempts are used up (or `final`).
   * Fenced like {@link Queue.complete}: `LeaseLost` and nothing changed when the lease was lost.
   *
   * @example
   * await queue.fail(job, 'SMTP 451', { retryIn: '30s' });
   */
  fail(job: JobLease, error: unknown, options: FailOptions = {}): ResultAsync<FailResult, SettleError> {
    const invalid = invalidLease(job);
    if (invalid !== undefined) return errAsync(invalid);
    const parsed = parseOptions(failOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    const o = parsed.value;
    return this.failMany([{ job, error: errorText(error), retryInMs: o.retryIn, final: o.final }]).andThen(
      (r) => {
        const outcome = r.get(job.id);
        return outcome === undefined ? err(new LeaseLost(job.id)) : ok(outcome);
      },
    );
  }

  /**
   * Writes many failures in ONE statement. The map holds the jobs that were still ours; a job missing
   * from it had lost its lease (or had a malformed id or lease token, which is sent nowhere).
   *
   * @example
   * const r = await queue.failMany([{ job, error: 'timeout' }]);
   */
  failMany(all: readonly FailItem[]): ResultAsync<Map<string, FailResult>, DatabaseFailure> {
    const items = splitLeases(all, (i) => i.job).valid;
    if (items.length === 0) return okAsync(new Map());
    return run<{ id: string; state: 'pending' | 'dead'; run_at: Date }>(this.pool, this.#sql.fail, [
      items.map((i) => i.job.id),
      items.map((i) => i.job.leaseToken),
      // NUL (U+0000) cannot be stored in text: an error message holding one (binary protocols…) made
      // the whole fail statement fail with 22021, so the job stayed running until its lease expired
      // (found by test/property/fuzz-queue). Replaced by U+FFFD.
      items.map((i) => i.error.slice(0, 10_000).replaceAll('\u0000', '\ufffd')),
      items.map((i) => i.retryInMs ?? null),
      items.map((i) => i.final === true),
    ]).map((res) => new Map(res.rows.map((r) => [String(r.id), { state: r.state, runAt: r.run_at }])));
  }

  /**
   * Extends a running job's lease to now + `lease` (heartbeat). `LeaseLost` when it is no longer ours.
   *
   * @example
   * const until = await queue.extend(job, '2m');
   */
  extend(job: JobLease, lease: number | string = this.leaseMs): ResultAsync<Date, SettleError> {
    const invalid = invalidLease(job);
    if (invalid !== undefined) return errAsync(invalid);
    return this.extendMany([job], lease).andThen((r) => {
      const until = r.get(job.id);
      return until === undefined ? err(new LeaseLost(job.id)) : ok(until);
    });
  }

  /**
   * Extends many leases in one statement; the map holds the jobs still ours and their new expiry (a
   * job with a malformed id or lease token is sent nowhere and missing from it).
   *
   * @example
   * const r = await queue.extendMany(jobs, '30s');
   */
  extendMany(
    jobs: readonly JobLease[],
    lease: number | string = this.leaseMs,
  ): ResultAsync<Map<string, Date>, InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(claimOptionsSchema.shape.lease, lease);
    if (parsed.isErr()) return errAsync(parsed.error);
    const valid = splitLeases(jobs, (j) => j).valid;
    if (valid.length === 0) return okAsync(new Map());
    return run<{ id: string; lease_expires_at: Date }>(this.pool, this.#sql.extend, [
      valid.map((j) => j.id),
      valid.map((j) => j.leaseToken),
      parsed.value ?? this.leaseMs,
    ]).map((res) => new Map(res.rows.map((r) => [String(r.id), r.lease_expires_at])));
  }

  /**
   * Gives running jobs back to the queue now, without charging the attempt (used by a stopping
   * worker). Returns the ids released (the others had lost their lease already).
   *
   * @example
   * await queue.release(jobs);
   */
  release(all: readonly JobLease[]): ResultAsync<string[], DatabaseFailure> {
    const jobs = splitLeases(all, (j) => j).valid;
    if (jobs.length === 0) return okAsync([]);
    return run<{ id: string }>(this.pool, this.#sql.release, [
      jobs.map((j) => j.id),
      jobs.map((j) => j.leaseToken),
    ])
      .map((res) => res.rows.map((r) => String(r.id)))
      .andThen((ids) => run(this.pool, this.#sql.notify, []).map(() => ids));
  }

  /**
   * Returns running jobs whose lease expired (their worker died, stalled or lost its connection) to
   * pending after their backoff, or to dead on their last attempt. SKIP LOCKED batches, fenced by
   * state and expiry; safe to run from every worker at once (workers run it periodically).
   *
   * @example
   * const reaped = await queue.reap();
   * if (reaped.isOk()) console.log(reaped.value.requeued, reaped.value.dead);
   */
  reap(options: ReapOptions = {}): ResultAsync<ReapResult, InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(reapOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    const o = parsed.value;
    const loop = async (): Promise<Result<ReapResult, DatabaseFailure>> => {
      let requeued = 0;
      let dead = 0;
      for (let i = 0; i < o.maxBatches; i++) {
        const r = await run<{ id: string; state: string }>(this.pool, this.#sql.reap, [o.batch]);
        if (r.isErr()) return err(r.error);
        for (const row of r.value.rows) row.state === 'dead' ? dead++ : requeued++;
        if (r.value.rows.length < o.batch) break;
      }
      return ok({ requeued, dead });
    };
    return new ResultAsync(loop());
  }

  /**
   * Cancels a job in any state (deletes it, or archives it as 'cancelled'). A worker running it gets
   * `LeaseLost` on its settle. `NotFound` when there is no such job.
   *
   * @example
   * await queue.cancel(job.id);
   */
  cancel(id: string | number): ResultAsync<void, NotFound | DatabaseFailure> {
    // An id that cannot be a job id (not a decimal, or beyond bigint: a raw 22003 before) names no job.
    if (!isJobId(id)) return errAsync(new NotFound(`${this.schema}.jobs`, [id]));
    return run<{ id: string }>(this.pool, this.#sql.cancel, [String(id)]).andThen((res) =>
      res.rowCount === 0 ? err(new NotFound(`${this.schema}.jobs`, [id])) : ok(undefined),
    );
  }

  /**
   * Puts dead jobs back to pending with their attempts reset (optionally only a task's or some ids).
   * Returns the ids redriven. Of several dead jobs sharing a key, only the newest one chosen is
   * redriven (one live job per key); the others stay dead, their `last_error` prefixed with
   * "not redriven: job N with the same key was redriven". A dead job whose key is live again stays dead.
   *
   * @example
   * const r = await queue.redrive({ task: 'email' });
   */
  redrive(options: RedriveOptions = {}): ResultAsync<string[], InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(redriveOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    const o = parsed.value;
    const params = [o.task ?? null, o.ids?.map(String) ?? null, o.limit];
    // A concurrent enqueue or redrive took one of the keys after this statement's snapshot (23505), or
    // two redrives noting each other's keys deadlocked (40P01): the statement changed nothing, so it
    // runs again with a fresh snapshot, which sees that key live and leaves its dead jobs alone. Bounded.
    const attempt = (left: number): ResultAsync<string[], DatabaseFailure> =>
      run<{ id: string }>(this.pool, this.#sql.redrive, params)
        .map((res) => res.rows.map((r) => String(r.id)))
        .orElse((e) =>
          left > 0 && (e.kind === 'UniqueViolation' || e.kind === 'DeadlockDetected')
            ? attempt(left - 1)
            : errAsync(e),
        );
    return attempt(REDRIVE_RACE_RETRIES).andThen((ids) =>
      ids.length > 0 ? run(this.pool, this.#sql.notify, []).map(() => ids) : ok(ids),
    );
  }

  /**
   * Counts jobs by state, the oldest ready job's age and the jobs table's dead tuples.
   *
   * @example
   * const s = await queue.stats();
   * if (s.isOk()) console.log(s.value.pending, s.value.oldestReadyMs, s.value.deadTuples);
   */
  stats(): ResultAsync<QueueStats, DatabaseFailure> {
    type Row = {
      pending: number;
      ready: number;
      running: number;
      expired: number;
      dead: number;
      oldest_ready_ms: number | null;
    };
    return run<Row>(this.pool, this.#sql.stats, []).andThen((counts) =>
      run<{ live: number; dead: number }>(this.pool, this.#sql.tableStats, [this.schema]).map((table) => {
        const c = counts.rows[0];
        const t = table.rows[0];
        return {
          pending: c?.pending ?? 0,
          ready: c?.ready ?? 0,
          running: c?.running ?? 0,
          expired: c?.expired ?? 0,
          dead: c?.dead ?? 0,
          oldestReadyMs: Math.max(0, Math.round(c?.oldest_ready_ms ?? 0)),
          deadTuples: t?.dead ?? 0,
          liveTuples: t?.live ?? 0,
        };
      }),
    );
  }

  /**
   * Runs the fenced completion of one job on `db` (a transaction) and lets driver errors propagate
   * unchanged, so the TxManager running the transaction can classify and retry them. Returns false
   * when the lease was lost. Used by a handler's `ctx.transaction`.
   *
   * @example
   * await tm.do(async (tx) => ((await queue.completeWithin(tx, job)) ? ok(1) : err(new LeaseLost(job.id))));
   */
  async completeWithin(db: Db, job: JobLease): Promise<boolean> {
    const res = await (db as Queryable).query<{ ids: string[] }>(this.#sql.complete, [
      [job.id],
      [job.leaseToken],
    ]);
    return (res.rows[0]?.ids.length ?? 0) > 0;
  }

  /** The payload schema of a task (undefined if not registered). */
  schemaOf(task: string): PayloadSchema | undefined {
    return Object.hasOwn(this.#tasks, task) ? this.#tasks[task] : undefined;
  }

  /**
   * Starts a worker running `handlers` (task name → async function). Returns at once; the worker
   * runs until `stop()` or the `signal` aborts. See `WorkOptions` for concurrency, batching, LISTEN,
   * timeouts and the graceful stop.
   *
   * @example
   * const worker = queue.work({ email: async (job, { signal }) => send(job.payload, signal) }, { concurrency: 8 });
   * process.on('SIGTERM', () => void worker.stop());
   */
  work(handlers: WorkHandlers<T>, options: WorkOptionsInput = {}): QueueWorker<T> {
    return new QueueWorker(this, handlers, options);
  }
}

function invalidPayload(message: string): InvalidOptions {
  return new InvalidOptions([{ path: ['payload'], message }]);
}
