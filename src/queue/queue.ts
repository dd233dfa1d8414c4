import { err, errAsync, ok, okAsync, type Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import {
  type DatabaseFailure,
  InvalidOptions,
  LeaseLost,
  NotFound,
  type TxKitError,
  UnknownTask,
} from '../errors/errors.js';
import { LogSink } from '../observability/log-sink.js';
import type { Logger } from '../observability/logger.js';
import { resolveOpenTelemetry } from '../observability/otel-api.js';
import { type QueueSend, QueueTelemetry } from '../observability/queue-telemetry.js';
import { guardClientErrors } from '../tx/guard-client-errors.js';
import type { Db } from '../tx/types.js';
import { checkedJob } from './checked-job.js';
import { errorText } from './error-text.js';
import { limitsDeclaration, ratesDeclared } from './group-limits.js';
import { type EnqueuedJob, type Job, type JobLease, type JobState, uncheckedPayloads } from './job.js';
import { type PayloadInput, type PayloadSchema, validatePayload } from './payload-schema.js';
import { progressJson } from './progress-json.js';
import {
  claimOptionsSchema,
  enqueueManyOptionsSchema,
  enqueueOptionsSchema,
  failOptionsSchema,
  metricsOptionsSchema,
  parseOptions,
  pruneOptionsSchema,
  queueOptionsSchema,
  reapOptionsSchema,
  redriveOptionsSchema,
} from './queue-options.js';
import type {
  CancelResult,
  ClaimOptions,
  EnqueueError,
  EnqueueManyOptions,
  EnqueueManyResult,
  EnqueueOptions,
  FailOptions,
  JobInfo,
  MetricsOptions,
  PruneOptions,
  PruneResult,
  QueueOptions,
  QueueStats,
  ReapOptions,
  RedriveOptions,
  SettleError,
} from './queue-types.js';
import { declareSchedules } from './schedules/schedule-options.js';
import { runSchedulePass, type ScheduleContext, type SchedulePassResult } from './schedules/schedule-pass.js';
import { scheduleStatements } from './schedules/schedule-sql.js';
import {
  type FireSchedulesOptions,
  fireSchedulesOptionsSchema,
  type ScheduleState,
  scheduleStates,
} from './schedules/schedule-state.js';
import type { DeclaredSchedule } from './schedules/schedule-types.js';
import { cancelChannel, type MigrateResult, migrateQueue, notifyChannel } from './schema/migrate-queue.js';
import { storableJson } from './storable-json.js';
import { type InsertStatements, insertJobsValues, insertStatements } from './store/insert-jobs.js';
import { JobStatements } from './store/job-statements.js';
import type {
  CompleteManyResult,
  FailItem,
  FailResult,
  QueueTxManager,
  ReapResult,
  TaskMap,
} from './store/job-store.js';
import { type QueueMetrics, readQueueMetrics, type StateCountsRow } from './store/queue-health.js';
import { type QueueStatements, queueStatements } from './store/queue-sql.js';
import { runStatement } from './store/run-statement.js';
import { invalidLease, isJobId } from './store/split-leases.js';
import type { WorkHandlers, WorkOptionsInput } from './worker/work-options.js';
import { QueueWorker } from './worker/worker.js';
import type { QueueSettings, WorkerPort } from './worker/worker-port.js';

const ENQUEUE_RACE_RETRIES = 5;
const REDRIVE_RACE_RETRIES = 5;

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
export class Queue<T extends TaskMap = TaskMap> {
  /** The pool the queue's own statements run on. */
  readonly pool: pg.Pool;
  /** The TxManager that runs handler transactions. */
  readonly txManager: QueueTxManager;
  /** The schema of the queue's tables. */
  readonly schema: string;
  /** The NOTIFY channel workers LISTEN on. */
  readonly channel: string;
  /** The NOTIFY channel carrying the ids of cancelled running jobs (workers LISTEN on it too). */
  readonly cancelChannel: string;
  /** Registered task names. */
  readonly taskNames: readonly string[];
  /** Default lease in ms. */
  readonly leaseMs: number;
  /** Whether the queue declares `groups` or `taskRates`: its claims are limited. */
  readonly limited: boolean;
  /**
   * Whether its workers' completions take over the group slots they free (a serial group's next job
   * goes to the worker that finished the one before, with no claim): limits declared, all of them
   * concurrency.
   */
  readonly takesOver: boolean;
  /**
   * Whether the queue declares a rate limit (a group's `rate`, or `taskRates`): its workers claim only for
   * their free handler slots, with no local queue, so that a job starts when it is claimed.
   */
  readonly rated: boolean;
  /** The `logger` option: where the workers' log lines go (else console.error, rate-limited). */
  readonly logger: Logger | undefined;
  /** Spans and counters of enqueues and job runs (no-op without OpenTelemetry). */
  readonly telemetry: QueueTelemetry;
  readonly #tasks: T;
  readonly #sql: QueueStatements;
  readonly #maxAttempts: number;
  readonly #backoff: { readonly baseMs: number; readonly capMs: number };
  readonly #schedules: ScheduleContext;
  /** Task → capabilities a worker needs to claim it (`requires`). */
  readonly requires: Readonly<Record<string, readonly string[]>>;
  /** The one insert into jobs, as enqueue, enqueueMany and schedule ticks run it. */
  readonly #inserts: InsertStatements;
  /** The claim, settle, lease, reap and progress statements (what the worker's parts run). */
  readonly #jobs: JobStatements;
  /** What its workers are given: the statements, the settings and the upkeep (never the queue). */
  readonly #port: WorkerPort;
  /** Where a claim reports a failure it cannot return (see {@link Queue.claim}). */
  readonly #log: LogSink;

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
    this.cancelChannel = cancelChannel(o.schema);
    this.#tasks = options.tasks;
    this.taskNames = Object.freeze(Object.keys(options.tasks));
    this.leaseMs = o.lease;
    this.logger = o.logger;
    this.telemetry = new QueueTelemetry(resolveOpenTelemetry(o.telemetry), o.pool.options, o.schema);
    this.#maxAttempts = o.maxAttempts;
    this.#backoff = o.backoff;
    this.#sql = queueStatements(o.schema, {
      archive: o.archive,
      channel: this.channel,
      cancelChannel: this.cancelChannel,
    });
    const unknownRequired = Object.keys(o.requires).filter((t) => !Object.hasOwn(options.tasks, t));
    if (unknownRequired.length > 0) {
      throw new InvalidOptions(
        unknownRequired.map((t) => ({
          path: ['requires', t],
          message: `'${t}' is not one of the queue's tasks`,
        })),
      );
    }
    this.requires = Object.freeze({ ...o.requires });
    // The declared group and task limits (jsonb for the limited claim), or undefined: the plain claim.
    const limits = limitsDeclaration(o.groups, o.taskRates);
    this.limited = limits !== undefined;
    this.rated = ratesDeclared(o.groups, o.taskRates);
    this.takesOver = this.limited && !this.rated;
    this.#jobs = new JobStatements({
      pool: o.pool,
      sql: this.#sql,
      limits,
      takesOver: this.takesOver,
    });
    const declared = declareSchedules(options.schedules, options.tasks);
    if (declared.isErr()) throw declared.error;
    this.#inserts = insertStatements(o.schema);
    this.#schedules = {
      pool: o.pool,
      sql: scheduleStatements(o.schema),
      insertTicks: this.#inserts.insertTicks,
      send: (task, count) => this.telemetry.send(task, count),
      declared: declared.value,
      maxAttempts: o.maxAttempts,
      backoff: o.backoff,
    };
    this.#log = new LogSink(o.logger, 'pg-txkit queue');
    const settings: QueueSettings = {
      logger: this.logger,
      telemetry: this.telemetry,
      channel: this.channel,
      cancelChannel: this.cancelChannel,
      leaseMs: this.leaseMs,
      limited: this.limited,
      takesOver: this.takesOver,
      rated: this.rated,
      pool: this.pool,
      txManager: this.txManager,
      requires: this.requires,
      schemaOf: (task) => this.#schemaOf(task),
    };
    this.#port = {
      store: this.#jobs,
      settings,
      upkeep: {
        metrics: () => this.metrics(),
        prune: (options) => this.prune(options),
        declaredSchedules: this.#schedules.declared,
        fireSchedules: (options) => this.fireSchedules(options),
      },
    };
    ports.set(this, this.#port);
  }

  /** The schedules this queue declares (validated, with their definition hashes). */
  get declaredSchedules(): readonly DeclaredSchedule[] {
    return this.#schedules.declared;
  }

  /**
   * One scheduler pass (what every worker runs each `scheduleInterval`): fires every due tick exactly
   * once across replicas — the tick's job (key `schedule:<name>:<tick ISO>`) is inserted in the
   * transaction that moves the schedule's persisted `next_run_at` past it, under the schedule row's
   * `FOR UPDATE SKIP LOCKED` lock. With `declare` (default true) it first records this process's schedule
   * definitions as live and brings each stored schedule to the definition in force: the newest deploy
   * that a replica seen within `liveness` (default 1 minute) still declares; a schedule none declares is
   * disabled.
   *
   * @example
   * const pass = await queue.fireSchedules();
   * if (pass.isOk()) for (const f of pass.value.fired) console.log(f.schedule, f.tick, f.jobId);
   */
  fireSchedules(
    options: FireSchedulesOptions = {},
  ): ResultAsync<SchedulePassResult, InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(fireSchedulesOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    return runSchedulePass(this.#schedules, parsed.value);
  }

  /**
   * The stored schedules: definition in force, enabled, next run, last tick, ticks fired and skipped.
   *
   * @example
   * const list = await queue.listSchedules();
   * if (list.isOk()) console.log(list.value.map((s) => [s.name, s.nextRunAt]));
   */
  listSchedules(): ResultAsync<ScheduleState[], DatabaseFailure> {
    return scheduleStates(this.pool, this.#schedules.sql);
  }

  /**
   * Creates or upgrades the queue's schema (numbered migrations, once each, under a transaction-scoped
   * advisory lock: safe when many replicas start at once). Each applied migration is recorded with the
   * sha-256 of its frozen file; a schema whose record differs from what this version ships (an edited
   * migration, or a schema migrated by another build) gets {@link MigrationChanged} and nothing applied.
   *
   * @example
   * const migrated = await queue.migrate();
   * if (migrated.isErr()) throw migrated.error;
   */
  migrate(): ResultAsync<MigrateResult, TxKitError> {
    return migrateQueue(this.pool, this.schema, { logger: this.logger, telemetry: this.telemetry.api });
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
      return storableJson(parsed.value, 'payload', 'the payload').map(() => parsed.value);
    }
    return err(parsed.error);
  }

  /**
   * Adds a job. Pass your transaction as `db` to make it part of the business transaction (the job
   * exists iff it commits: a transactional outbox), or the pool for a standalone insert. The payload
   * is validated by the task's schema first: `UnknownTask` or `InvalidOptions` and nothing inserted.
   * With `key`, a live (pending or running) job of the task with the same key is returned instead of
   * inserting a duplicate (`created: false`). With `group`, the job counts against that group's limits
   * (the queue's `groups` option): e.g. one job per customer at a time.
   *
   * @example
   * const job = await queue.enqueue(tx, 'email', { to: 'a@example.com' }, { key: 'welcome:42', priority: -1 });
   * if (job.isOk() && !job.value.created) console.log('already queued', job.value.id);
   * await queue.enqueue(tx, 'email', { to: 'b@example.com' }, { group: 'customer-42' });
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
    const send = this.telemetry.send(task, 1);
    const params = insertJobsValues({
      task,
      payloads: [JSON.stringify(value)],
      priority: o.priority,
      runAt: o.runAt ?? null,
      maxAttempts: o.maxAttempts ?? this.#maxAttempts,
      backoff,
      keys: [o.key ?? null],
      groups: [o.group ?? null],
      traceContext: send?.carrier ?? null,
    });
    type Row = {
      id: string;
      task: string;
      state: JobState;
      run_at: Date;
      key: string | null;
      group_key: string | null;
      created: boolean;
    };
    const found = (row: Row): EnqueuedJob => ({
      id: String(row.id),
      task: row.task,
      state: row.state,
      runAt: row.run_at,
      key: row.key,
      group: row.group_key,
      created: row.created,
    });
    const key = o.key;
    const attempt = (left: number): ResultAsync<EnqueuedJob, EnqueueError> =>
      runStatement<Row>(db, this.#inserts.enqueue, params).andThen((res) => {
        const row = res.rows[0];
        if (row !== undefined) return ok<EnqueuedJob, EnqueueError>(found(row));
        // No row: a live job of the task holds the key (an insert without a key always returns its job).
        if (key === undefined) return errAsync(new NotFound(`${this.schema}.jobs`, []));
        return runStatement<Row>(db, this.#inserts.liveKeyed, [task, key]).andThen((live) => {
          const holder = live.rows[0];
          if (holder !== undefined) return ok<EnqueuedJob, EnqueueError>(found(holder));
          // The keyed job that blocked the insert ended before the read: insert again. Bounded.
          if (left > 0) return attempt(left - 1);
          return errAsync(new NotFound(`${this.schema}.jobs`, [key]));
        });
      });
    return send === undefined
      ? attempt(ENQUEUE_RACE_RETRIES)
      : traced(send, attempt(ENQUEUE_RACE_RETRIES), (j) => [j.id]);
  }

  /**
   * Adds many jobs of one task in ONE statement (unnest), with one NOTIFY: thousands per round trip.
   * Every payload is validated first; one invalid payload fails the whole call and inserts nothing.
   * `group` puts every job in one group, `groups` gives one group (or null) per payload.
   *
   * @example
   * const r = await queue.enqueueMany(pool, 'email', users.map((u) => ({ to: u.email })));
   * if (r.isOk()) console.log(r.value.ids.length);
   * await queue.enqueueMany(pool, 'email', users.map((u) => ({ to: u.email })), { groups: users.map((u) => `customer-${u.customerId}`) });
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
    if (o.groups !== undefined && o.groups.length !== payloads.length) {
      return errAsync(
        new InvalidOptions([{ path: ['groups'], message: 'needs one group (or null) per payload' }]),
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
    const send = this.telemetry.send(task, values.length);
    const inserted = runStatement<{ id: string }>(
      db,
      this.#inserts.enqueueMany,
      insertJobsValues({
        task,
        payloads: values,
        priority: o.priority,
        runAt: o.runAt ?? null,
        maxAttempts: o.maxAttempts ?? this.#maxAttempts,
        backoff,
        keys: o.keys ?? values.map(() => null),
        groups: o.groups ?? values.map(() => o.group ?? null),
        traceContext: send?.carrier ?? null,
      }),
    ).map((res) => ({ ids: res.rows.map((r) => String(r.id)), skipped: values.length - res.rows.length }));
    return send === undefined ? inserted : traced(send, inserted, (r) => r.ids);
  }

  /**
   * Claims up to `batch` runnable jobs in one statement (MATERIALIZED CTE with FOR UPDATE SKIP
   * LOCKED, then UPDATE … RETURNING): each gets `attempts + 1`, a fresh lease token and a lease expiry.
   * Run them, then `complete` or `fail` each before the lease expires (or `extend` it). On a queue with
   * `groups` or `taskRates`, the claim skips the jobs of full groups and takes the jobs behind them; the
   * limits are checked and counted under the group's row lock in the same statement, so no number of
   * concurrent claimers can exceed them.
   *
   * A job enqueued from SQL (`<schema>.enqueue(…)`) has its payload validated by its task's schema here,
   * as a worker validates it before its handler: it comes back as that schema parses it, and one the
   * schema refuses is failed at once (dead, the schema's issues in its `last_error`) and left out of the
   * result; the others come back all the same. (Should that failure not be written — the database went
   * away after the claim — it is logged, and the job comes back to a claim when its lease expires.)
   *
   * @example
   * const jobs = await queue.claim({ batch: 10, lease: '1m' });
   */
  claim(options: ClaimOptions = {}): ResultAsync<Job[], InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(claimOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    const o = parsed.value;
    return this.#jobs
      .claimBatch({ batch: o.batch, lease: o.lease ?? this.leaseMs, tasks: o.tasks ?? this.taskNames })
      .andThen((claimed) => this.#runnable(claimed.jobs));
  }

  /**
   * The claimed jobs a caller may run: each job enqueued from SQL checked by its task's schema, those it
   * refuses failed (final, through the fenced fail statement a worker's settle uses) and left out.
   */
  #runnable(jobs: Job[]): ResultAsync<Job[], never> {
    const refused: FailItem[] = [];
    const runnable: Job[] = [];
    for (const job of jobs) {
      if (!uncheckedPayloads.has(job)) {
        runnable.push(job);
        continue;
      }
      const checked = checkedJob(job, this.#schemaOf(job.task));
      if (checked.isOk()) runnable.push(checked.value);
      else refused.push({ job, error: errorText(checked.error), final: true });
    }
    if (refused.length === 0) return okAsync(runnable);
    return this.#jobs
      .failMany(refused)
      .map(() => runnable)
      .orElse((error) => {
        this.#log.error(
          'claim',
          { err: error, schema: this.schema, jobs: refused.map((r) => r.job.id) },
          'claim could not fail the jobs whose payload their task refuses; they come back when their lease expires',
        );
        return okAsync(runnable);
      });
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
    return this.#jobs.completeMany(jobs, db);
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
    return this.#jobs.failMany(all);
  }

  /**
   * Extends a running job's lease to now + `lease` (heartbeat; at least 5 s, else `InvalidOptions` and
   * nothing sent). `LeaseLost` when it is no longer ours.
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
    // As an object, so the issue's path names the lease.
    const parsed = parseOptions(claimOptionsSchema.pick({ lease: true }), { lease });
    if (parsed.isErr()) return errAsync(parsed.error);
    return this.#jobs.extendMany(jobs, parsed.value.lease ?? this.leaseMs);
  }

  /**
   * Gives running jobs back to the queue now, without charging the attempt (used by a stopping
   * worker). Returns the ids released (the others had lost their lease already).
   *
   * @example
   * await queue.release(jobs);
   */
  release(all: readonly JobLease[]): ResultAsync<string[], DatabaseFailure> {
    return this.#jobs.release(all);
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
    return this.#jobs.reap(parsed.value, 'front');
  }

  /**
   * Cancels a job in any state and returns the state it was in; `NotFound` when there is no such job
   * (never enqueued, already done, already cancelled). The job leaves the jobs table at once (archived
   * as 'cancelled' with `archive: true`):
   * - pending: it will never run;
   * - running: its handler's `ctx.signal` aborts with {@link JobCancelled} — at once on a worker that
   *   LISTENs (the id goes out on {@link Queue.cancelChannel} when the cancel commits), else at that
   *   worker's next heartbeat (reason `LeaseLost`). Its later settle writes nothing, a `ctx.transaction`
   *   rolls back with `LeaseLost`, and the run ends with outcome 'cancelled' (or 'lost');
   * - dead: it will not be redriven.
   * A settle that commits first wins: the job is then done and this returns `NotFound`.
   *
   * @example
   * const r = await queue.cancel(job.id);
   * if (r.isOk() && r.value.state === 'running') console.log('its handler is being aborted');
   */
  cancel(id: string | number): ResultAsync<CancelResult, NotFound | DatabaseFailure> {
    // An id that cannot be a job id (not a decimal, or beyond bigint: a raw 22003 before) names no job.
    if (!isJobId(id)) return errAsync(new NotFound(`${this.schema}.jobs`, [id]));
    return runStatement<{ id: string; state: JobState }>(this.pool, this.#sql.cancel, [String(id)]).andThen(
      (res) => {
        const row = res.rows[0];
        return row === undefined
          ? err(new NotFound(`${this.schema}.jobs`, [id]))
          : ok({ id: row.id, state: row.state });
      },
    );
  }

  /**
   * Reads one job: live (pending, running, dead) from the jobs table, or archived (done, cancelled:
   * only with `archive: true`) — with its progress. `NotFound` when it is in neither (a completed job
   * without the archive is deleted).
   *
   * @example
   * const j = await queue.job(id);
   * if (j.isOk()) console.log(j.value.state, j.value.progress);
   */
  job(id: string | number): ResultAsync<JobInfo, NotFound | DatabaseFailure> {
    if (!isJobId(id)) return errAsync(new NotFound(`${this.schema}.jobs`, [id]));
    type Row = {
      id: string;
      task: string;
      payload: unknown;
      state: JobInfo['state'];
      attempts: number;
      key: string | null;
      last_error: string | null;
      progress: unknown;
      created_at: Date;
      run_at: Date | null;
      max_attempts: number | null;
      lease_expires_at: Date | null;
      finished_at: Date | null;
    };
    return runStatement<Row>(this.pool, this.#sql.job, [String(id)]).andThen((res) => {
      const r = res.rows[0];
      if (r === undefined) return err(new NotFound(`${this.schema}.jobs`, [id]));
      return ok({
        id: r.id,
        task: r.task,
        state: r.state,
        payload: r.payload,
        attempts: r.attempts,
        key: r.key,
        lastError: r.last_error,
        progress: r.progress ?? null,
        createdAt: r.created_at,
        runAt: r.run_at,
        maxAttempts: r.max_attempts,
        leaseExpiresAt: r.lease_expires_at,
        finishedAt: r.finished_at,
      });
    });
  }

  /**
   * Stores a running job's progress: a JSON value of at most 8 KiB as JSON, fenced by
   * the lease token (`LeaseLost` and nothing written when the lease was lost). Not throttled: inside a
   * handler use `ctx.progress`, which coalesces calls. The value is kept across retries (the next
   * attempt sees it as `job.progress`) and copied to the archive. `InvalidOptions` and nothing sent
   * for a value that is not JSON or too large.
   *
   * @example
   * await queue.progress(job, { done: 40, total: 100 });
   */
  progress(job: JobLease, value: unknown): ResultAsync<void, SettleError> {
    const invalid = invalidLease(job);
    if (invalid !== undefined) return errAsync(invalid);
    const json = progressJson(value);
    if (json.isErr()) return errAsync(json.error);
    return this.#jobs.writeProgress(job, json.value);
  }

  /**
   * Deletes archived jobs finished more than `olderThan` ago (and, with `deadOlderThan`, dead jobs that
   * died longer ago than that), oldest first, in batches of `batch` rows: one short autocommit statement
   * per batch (row locks on that batch only, SKIP LOCKED), never one long transaction, so completions and
   * claims go on meanwhile. Stops after `limit` rows in all; returns how many of each it deleted. Workers
   * can run it periodically (the `retention` work option).
   *
   * @example
   * const r = await queue.prune({ olderThan: '7d', deadOlderThan: '30d' });
   * if (r.isOk()) console.log(r.value.archived, r.value.dead);
   */
  prune(options: PruneOptions): ResultAsync<PruneResult, InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(pruneOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    const o = parsed.value;
    const loop = async (): Promise<Result<PruneResult, DatabaseFailure>> => {
      let left = o.limit;
      const sweep = async (text: string, ageMs: number): Promise<Result<number, DatabaseFailure>> => {
        let deleted = 0;
        while (left > 0) {
          const n = Math.min(o.batch, left);
          const r = await runStatement(this.pool, text, [ageMs, n]);
          if (r.isErr()) return err(r.error);
          const count = r.value.rowCount ?? 0;
          deleted += count;
          left -= count;
          if (count < n) break;
        }
        return ok(deleted);
      };
      const archived = o.olderThan === undefined ? ok(0) : await sweep(this.#sql.pruneArchive, o.olderThan);
      if (archived.isErr()) return err(archived.error);
      const dead = o.deadOlderThan === undefined ? ok(0) : await sweep(this.#sql.pruneDead, o.deadOlderThan);
      if (dead.isErr()) return err(dead.error);
      return ok({ archived: archived.value, dead: dead.value });
    };
    return new ResultAsync(loop());
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
      runStatement<{ id: string }>(this.pool, this.#sql.redrive, params)
        .map((res) => res.rows.map((r) => String(r.id)))
        .orElse((e) =>
          left > 0 && (e.kind === 'UniqueViolation' || e.kind === 'DeadlockDetected')
            ? attempt(left - 1)
            : errAsync(e),
        );
    return attempt(REDRIVE_RACE_RETRIES).andThen((ids) =>
      ids.length > 0 ? runStatement(this.pool, this.#sql.notify, []).map(() => ids) : ok(ids),
    );
  }

  /**
   * Counts jobs by state, the oldest ready job's age and the jobs table's dead tuples: exact, and it
   * reads every row of the jobs table (count(*) FILTER …) — cost grows with the backlog. For a
   * dashboard or a metrics exporter use {@link Queue.metrics} (bounded cost).
   *
   * @example
   * const s = await queue.stats();
   * if (s.isOk()) console.log(s.value.pending, s.value.oldestReadyMs, s.value.deadTuples);
   */
  stats(): ResultAsync<QueueStats, DatabaseFailure> {
    return runStatement<StateCountsRow>(this.pool, this.#sql.stats, []).andThen((counts) =>
      runStatement<{ live: number; dead: number }>(this.pool, this.#sql.tableStats, [this.schema]).map(
        (table) => {
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
        },
      ),
    );
  }

  /**
   * The queue's health, cheap at any backlog (one statement, bounded cost; safe to poll from a
   * dashboard): counts by state that are exact below `cap` (default 10 000) and a lower bound above it
   * (`exact: false`), the oldest ready job's age (exact), and the jobs table's live and dead tuples and
   * size from PostgreSQL's statistics (estimates). {@link Queue.stats} counts exactly, reading every row.
   *
   * @example
   * const m = await queue.metrics();
   * if (m.isOk()) console.log(m.value.ready.count, m.value.ready.exact ? '' : '+', m.value.oldestReadyMs);
   */
  metrics(options: MetricsOptions = {}): ResultAsync<QueueMetrics, InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(metricsOptionsSchema, options);
    if (parsed.isErr()) return errAsync(parsed.error);
    return readQueueMetrics(this.pool, this.schema, parsed.value.cap);
  }

  /** The payload schema of a task (undefined if not registered). */
  #schemaOf(task: string): PayloadSchema | undefined {
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
    return new QueueWorker(this.#port, handlers, options);
  }
}

/** Each queue's {@link WorkerPort} (see {@link workerPort}). */
const ports = new WeakMap<object, WorkerPort>();

/**
 * The port a queue's workers run on: its `JobStatements` as the narrow stores, its settings and its
 * upkeep. Inside the package only (not exported from its entry points): for tests that run the
 * worker's statements themselves, or start a worker on a store they wrap.
 *
 * @example
 * const { store } = workerPort(queue);
 * const batch = await store.claimBatch({ batch: 10, lease: 30_000, tasks: [...queue.taskNames] });
 */
export function workerPort(queue: Queue): WorkerPort {
  const port = ports.get(queue);
  if (port === undefined) throw new TypeError('not a Queue of this copy of pg-txkit');
  return port;
}

/** Ends an enqueue's span when its statement settles (the result passes through unchanged). */
function traced<T, E>(
  send: QueueSend,
  result: ResultAsync<T, E>,
  ids: (value: T) => readonly string[],
): ResultAsync<T, E> {
  return result
    .map((value) => {
      send.end({ ids: ids(value) });
      return value;
    })
    .mapErr((error) => {
      send.end({ error });
      return error;
    });
}
