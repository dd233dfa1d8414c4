import { err, errAsync, ok, type Result, ResultAsync } from 'neverthrow';
import {
  type DatabaseFailure,
  type InvalidOptions,
  JobCancelled,
  LeaseLost,
  PoolExhausted,
  type TxKitError,
} from '../../errors/errors.js';
import type { LogSink } from '../../observability/log-sink.js';
import type { QueueProcess } from '../../observability/queue-telemetry.js';
import { freeClients } from '../../tx/acquire-client.js';
import type { Tx } from '../../tx/types.js';
import { checkedJob } from '../checked-job.js';
import { errorText } from '../error-text.js';
import { type Job, uncheckedPayloads } from '../job.js';
import { progressJson } from '../progress-json.js';
import type { FailResult, LeaseStore, ProgressStore, SettleStore } from '../store/job-store.js';
import { ProgressWriter } from './progress-writer.js';
import type { SettleBatcher, SettleOutcome } from './settle-batcher.js';
import type { JobContext, JobHandler, JobOutcome, WorkerHooks, WorkerPhase } from './work-options.js';
import type { QueueSettings } from './worker-port.js';

/**
 * The statements the handler runner runs: a handler's `ctx.transaction` completes its job in it, the
 * heartbeat extends leases, `ctx.progress` writes progress.
 */
export type RunnerStore = Pick<SettleStore, 'completeWithin'> &
  Pick<LeaseStore, 'extendMany'> &
  ProgressStore;

/** What the handler runner reads from its queue: the pool, TxManager, telemetry and payload schemas. */
export type RunnerSettings = Pick<QueueSettings, 'pool' | 'txManager' | 'telemetry' | 'schemaOf'>;

/**
 * The reason of a handler's signal when it runs past `handlerTimeout`, and the error its attempt fails with
 * once the handler returns.
 */
export class HandlerTimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`handler timed out after ${ms} ms`);
  }
  override get name(): string {
    return 'HandlerTimeout';
  }
}

type AbortWhy = 'timeout' | 'stop' | 'lost' | 'cancelled';

/**
 * Whether a run still holds its job: not aborted, or aborted by its timeout or a stopping worker. Such a
 * run waits for its handler to return, and its job stays leased (heartbeated) until then: given back or
 * failed while the handler still ran, the job would be claimed again and run twice at the same time.
 */
const holdsJob = (why: AbortWhy | undefined): boolean =>
  why === undefined || why === 'timeout' || why === 'stop';

/** The handler's part ended without an error. */
const SUCCEEDED: unique symbol = Symbol('succeeded');
/** The handler returned a promise that has not settled yet. */
const WAITING: unique symbol = Symbol('waiting');

/** A job whose handler is running (one plain object per run: the runner's hot path allocates little). */
export interface Running {
  readonly job: Job;
  readonly startedAt: number;
  lastExtendAt: number;
  why: AbortWhy | undefined;
  reason: unknown;
  /** Created on the first read of `ctx.signal` (most handlers never read it). */
  controller: AbortController | undefined;
  /** The handler returned a promise that has not settled yet (an abort ends the wait for it). */
  waiting: boolean;
  /** The handler's part is over (returned, threw, settled or was aborted); later news is ignored. */
  handled: boolean;
  timer: ReturnType<typeof setTimeout> | undefined;
  durationMs: number;
  /** What the handler threw (a failed run, while its failure is written). */
  failure: unknown;
  /** The failure is final: the job goes dead whatever attempts are left (a payload its schema refuses). */
  final?: boolean;
  /** The run is over and counted out (see #finish). */
  finished: boolean;
  /** The processing span (OpenTelemetry), when something records. */
  span: QueueProcess | undefined;
  completedInTx: boolean;
  txError: unknown;
  txCalls: number;
  /** `ctx.transaction` calls of this run still open (each holds, or waits for, a pool client). */
  txOpen: number;
  /** Created on the first `ctx.progress` (coalesces its writes). */
  progress: ProgressWriter | undefined;
}

/** A job buffered in the worker's local queue (claimed, leased, not started). */
export interface BufferedJob {
  readonly job: Job;
  lastExtendAt: number;
}

/** What the runner reports to its worker. */
export interface HandlerRunnerEvents {
  /** A handler slot is free again (its settle may still be in flight). */
  readonly onSlotFree: () => void;
  /** A job's run ended with `outcome`. */
  readonly onOutcome: (outcome: JobOutcome) => void;
  /** An error outside the handler. */
  readonly onError: (error: unknown, phase: WorkerPhase) => void;
}

/** Options of {@link HandlerRunner}. */
export interface HandlerRunnerOptions {
  readonly handlers: Readonly<Record<string, JobHandler<unknown> | undefined>>;
  readonly leaseMs: number;
  readonly handlerTimeout: number | undefined;
  readonly hooks: WorkerHooks | undefined;
  /** `ctx.progress` writes at most this often, in ms. */
  readonly progressIntervalMs: number;
  /** Where a handler past its timeout is reported. */
  readonly log?: LogSink | undefined;
}

/**
 * The context a handler gets: `signal` is created on first read, `transaction` completes the job in it,
 * `progress` goes through the run's coalescing writer.
 */
class RunContext implements JobContext {
  readonly #running: Running;
  readonly #store: RunnerStore;
  readonly #settings: RunnerSettings;
  readonly #progressIntervalMs: number;
  readonly #onLost: (running: Running) => void;

  constructor(
    running: Running,
    store: RunnerStore,
    settings: RunnerSettings,
    progressIntervalMs: number,
    onLost: (running: Running) => void,
  ) {
    this.#running = running;
    this.#store = store;
    this.#settings = settings;
    this.#progressIntervalMs = progressIntervalMs;
    this.#onLost = onLost;
  }

  progress(value: unknown): ResultAsync<void, LeaseLost | InvalidOptions | DatabaseFailure> {
    const json = progressJson(value);
    if (json.isErr()) return errAsync(json.error);
    const running = this.#running;
    // The job is no longer ours (cancelled, lease lost, left to its lease by a stopped worker) or the
    // run is over: nothing to write.
    if (running.why === 'cancelled' || running.why === 'lost' || running.completedInTx || running.finished)
      return errAsync(new LeaseLost(running.job.id));
    const store = this.#store;
    // The write needs a pool client of its own. Awaited inside ctx.transaction while that transaction
    // holds the last free client (a pool of 1), it would wait on itself forever: refuse at once instead.
    if (running.txOpen > 0 && freeClients(this.#settings.pool) <= 0) {
      return errAsync(
        new PoolExhausted(
          'ctx.progress inside ctx.transaction needs a second client, but the pool has none free; ' +
            "waiting would deadlock on the handler's own transaction. Report progress outside ctx.transaction or enlarge the pool",
        ),
      );
    }
    running.progress ??= new ProgressWriter(
      running.job,
      this.#progressIntervalMs,
      (job, text) => store.writeProgress(job, text),
      () => this.#onLost(running),
    );
    return new ResultAsync(running.progress.report(json.value));
  }

  get signal(): AbortSignal {
    const running = this.#running;
    if (running.controller === undefined) {
      running.controller = new AbortController();
      if (running.why !== undefined) running.controller.abort(running.reason);
    }
    return running.controller.signal;
  }

  transaction<R>(fn: (tx: Tx) => Promise<R> | R): ResultAsync<R, LeaseLost | TxKitError> {
    const running = this.#running;
    const { job } = running;
    // Past its timeout the attempt is failed whatever the handler does next: its job, still leased until
    // the handler returns, is no longer its to complete. Refused before BEGIN (LeaseLost, as when the
    // lease is gone), the timeout as its cause.
    if (running.why === 'timeout') return errAsync(new LeaseLost(job.id, running.reason));
    const store = this.#store;
    running.txCalls++;
    running.txOpen++;
    // Through the TxManager's do(): its retries, propagation and fixes apply to the handler's transaction.
    const transaction = this.#settings.txManager.do(async (tx) => {
      const value = await fn(tx);
      // Timed out while `fn` ran: rolled back, the completion never sent (see above).
      if (running.why === 'timeout') return err(new LeaseLost(job.id, running.reason));
      // The fenced completion, in the handler's transaction: both commit or neither does.
      return (await store.completeWithin(tx, job)) ? ok(value) : err(new LeaseLost(job.id));
    }) as unknown as ResultAsync<R, LeaseLost | TxKitError>;
    return transaction
      .map((value) => {
        running.txOpen--;
        running.completedInTx = true;
        return value;
      })
      .mapErr((error) => {
        running.txOpen--;
        running.txError = error;
        return error;
      });
  }
}

/**
 * Runs handlers: one job per slot, with its timeout, its `ctx.transaction`, its settle (through the
 * batcher) and the heartbeat that extends the leases of running and buffered jobs. A handler is the
 * user's code: whatever it throws fails its job and never escapes. An aborted run (lost lease, cancel)
 * stops waiting for it; a timeout or a stopping worker's abort waits for the handler to return, its job
 * leased and its slot taken meanwhile (a handler that ignores its signal must not run alongside the
 * job's next attempt), until it returns or a stopping worker gives up on it ({@link HandlerRunner.abandon}).
 * A run's `ctx.progress` reports go through its own {@link ProgressWriter}; the last one is written before
 * the settle.
 *
 * @example
 * const runner = new HandlerRunner(store, settings, batcher, { handlers, leaseMs: 30_000, handlerTimeout: undefined, hooks: undefined, progressIntervalMs: 1000 }, events);
 * runner.start(job, Date.now());
 */
export class HandlerRunner {
  readonly #store: RunnerStore;
  readonly #settings: RunnerSettings;
  readonly #batcher: SettleBatcher<Running>;
  readonly #o: HandlerRunnerOptions;
  readonly #events: HandlerRunnerEvents;
  readonly #running = new Map<string, Running>();
  /** Runs started and not yet ended (their settle written or given up); counted, not kept (hot path). */
  #runs = 0;
  readonly #onIdle: (() => void)[] = [];
  /** Runs started in this tick, to run on one microtask. */
  readonly #toStart: Running[] = [];
  /** Jobs whose handlers returned after a stop's abort without completing them (see takeReleased). */
  readonly #released: Job[] = [];

  constructor(
    store: RunnerStore,
    settings: RunnerSettings,
    batcher: SettleBatcher<Running>,
    options: HandlerRunnerOptions,
    events: HandlerRunnerEvents,
  ) {
    this.#store = store;
    this.#settings = settings;
    this.#batcher = batcher;
    this.#o = options;
    this.#events = events;
  }

  /** Handlers running now. */
  get size(): number {
    return this.#running.size;
  }

  /**
   * Starts `job`'s handler on a microtask (a synchronous handler must not run inside the claim loop's
   * drain): the jobs started in one tick share ONE microtask, and the run goes on in callbacks, not in
   * async functions (their promises and frames were most of a no-op job's garbage).
   */
  start(job: Job, lastExtendAt: number): void {
    const running: Running = {
      job,
      startedAt: Date.now(),
      lastExtendAt,
      why: undefined,
      reason: undefined,
      controller: undefined,
      waiting: false,
      handled: false,
      timer: undefined,
      durationMs: 0,
      failure: undefined,
      finished: false,
      completedInTx: false,
      txError: undefined,
      txCalls: 0,
      txOpen: 0,
      progress: undefined,
      span: undefined,
    };
    this.#running.set(job.id, running);
    this.#runs++;
    this.#toStart.push(running);
    if (this.#toStart.length === 1) queueMicrotask(this.#startQueued);
  }

  /** Runs the handlers started since the last microtask (see start). */
  readonly #startQueued = (): void => {
    // A synchronous handler that ends frees its slot at once, and the worker may start the next job
    // while this loop runs: it is appended here and run in this same loop.
    const queued = this.#toStart;
    for (let i = 0; i < queued.length; i++) this.#guard(queued[i] as Running, this.#exec);
    queued.length = 0;
  };

  /** Runs one step of a run; a defect in the runner is reported and ends the run (its slot freed). */
  #guard(running: Running, step: (running: Running) => void): void {
    try {
      step(running);
    } catch (e) {
      this.#events.onError(e, 'worker');
      this.#finish(running);
    }
  }

  /**
   * The job was cancelled (heard on the cancel channel): aborts its handler's signal with
   * {@link JobCancelled}; its settle is skipped (the job is gone). Returns whether it was running here.
   */
  cancel(id: string): boolean {
    const running = this.#running.get(id);
    if (running === undefined || running.completedInTx) return false;
    if (running.why === 'timeout') {
      // Its signal is aborted already and the run waits for the handler: it ends cancelled, nothing written.
      running.why = 'cancelled';
      running.reason = new JobCancelled(id);
      return true;
    }
    if (running.why !== undefined) return false;
    this.#abort(running, 'cancelled', new JobCancelled(id));
    return true;
  }

  /**
   * A stopping worker's grace is over: aborts every running handler's signal. Unlike a timeout or a
   * cancel, the run still waits for its handler, and its job stays leased (and heartbeated) meanwhile:
   * released while its handler still ran, another worker would claim the job and run it at the same
   * time. A handler that then returns without completing its job ends `released`, its job in
   * {@link takeReleased}; one still running when the worker gives up is {@link abandon}ed.
   */
  abortForStop(): void {
    for (const r of this.#running.values()) this.#abort(r, 'stop', new Error('worker stopping'));
  }

  /** The jobs whose handlers returned after {@link abortForStop} without completing them: to be released. */
  takeReleased(): Job[] {
    return this.#released.splice(0);
  }

  /**
   * Gives up on the handlers still running after {@link abortForStop} (the stopping worker's wait is
   * over). Each run ends `unsettled` with nothing written: its job stays leased, no longer heartbeated,
   * until the lease lapses and the reaper gives it back. Whatever the handler does later
   * is not written by the worker (its return, its progress); a late `ctx.transaction` is fenced by the
   * lease token, so it completes the job only while the lease is still this run's. Returns their jobs.
   */
  abandon(): Job[] {
    const jobs: Job[] = [];
    for (const r of [...this.#running.values()]) {
      if (r.handled) continue;
      r.handled = true;
      r.waiting = false;
      clearTimeout(r.timer);
      r.progress?.close();
      r.durationMs = Date.now() - r.startedAt;
      jobs.push(r.job);
      this.#ended(
        r,
        'unsettled',
        new Error('handler still running when the worker stopped; its job is left to its lease'),
      );
    }
    return jobs;
  }

  /** Resolves when every run started so far has ended (its settle written or given up). */
  settled(): Promise<void> {
    if (this.#runs === 0) return Promise.resolve();
    return new Promise((resolve) => this.#onIdle.push(resolve));
  }

  /**
   * Extends the leases of running jobs and of `buffered` ones that are due (a third of the lease since
   * the last extension). A running job whose lease was lost is aborted (its signal fires); a buffered
   * one is dropped from `buffered`. Returns how many buffered jobs were dropped, undefined when no lease
   * was due (nothing sent), or the extension's failure (reported by the caller, which counts the streak).
   */
  async heartbeat(
    buffered: BufferedJob[],
  ): Promise<Result<number | undefined, InvalidOptions | DatabaseFailure>> {
    const now = Date.now();
    const third = this.#o.leaseMs / 3;
    // A handler past its timeout or aborted by a stopping worker still runs: its job stays ours until it
    // returns.
    const due = [...this.#running.values()].filter(
      (r) => holdsJob(r.why) && !r.completedInTx && now - r.lastExtendAt >= third,
    );
    const dueBuffered = buffered.filter((b) => now - b.lastExtendAt >= third);
    if (due.length === 0 && dueBuffered.length === 0) return ok(undefined);
    const r = await this.#store.extendMany(
      [...due.map((d) => d.job), ...dueBuffered.map((b) => b.job)],
      this.#o.leaseMs,
    );
    if (r.isErr()) return err(r.error);
    let dropped = 0;
    for (const b of dueBuffered) {
      if (r.value.has(b.job.id)) b.lastExtendAt = now;
      else {
        // Lost before it started (cancelled, or reaped after a stall): drop it, nothing to undo.
        const at = buffered.indexOf(b);
        if (at >= 0) {
          buffered.splice(at, 1);
          dropped++;
        }
      }
    }
    for (const d of due) {
      if (r.value.has(d.job.id)) d.lastExtendAt = now;
      else if (!d.completedInTx && this.#running.has(d.job.id)) this.#lost(d);
    }
    return ok(dropped);
  }

  #timedOut(running: Running, ms: number): void {
    const { job } = running;
    this.#o.log?.warn(
      'handler-timeout',
      { jobId: job.id, task: job.task, attempt: job.attempts, timeoutMs: ms },
      `handler of job ${job.id} (${job.task}) ran past its ${ms} ms timeout: its signal is aborted; ` +
        'the attempt fails once the handler returns (its job stays leased and its slot taken until then)',
    );
    this.#abort(running, 'timeout', new HandlerTimeoutError(ms));
  }

  #abort(running: Running, why: AbortWhy, reason: unknown): void {
    if (running.why !== undefined) return;
    running.why = why;
    running.reason = reason;
    running.controller?.abort(reason);
    // The run stops waiting for the handler's promise, except on a timeout or a stop: its job stays leased
    // until the handler returns (see holdsJob).
    if (running.waiting && !holdsJob(why)) this.#guard(running, (r) => this.#handled(r, reason));
  }

  /** The handler is over: its slot is free for the next job while its settle is being written. */
  #free(id: string): void {
    if (this.#running.delete(id)) this.#events.onSlotFree();
  }

  #hook<K extends 'onJobStart' | 'onJobEnd'>(name: K, arg: Parameters<NonNullable<WorkerHooks[K]>>[0]): void {
    const hook = this.#o.hooks?.[name] as ((a: typeof arg) => void) | undefined;
    if (hook === undefined) return;
    try {
      hook(arg);
    } catch (e) {
      this.#events.onError(e, 'hook');
    }
  }

  #end(job: Job, durationMs: number, outcome: JobOutcome, error?: unknown): void {
    this.#events.onOutcome(outcome);
    this.#settings.telemetry.processed(job.task, outcome, error);
    if (this.#o.hooks?.onJobEnd === undefined) return;
    this.#hook(
      'onJobEnd',
      error === undefined ? { job, outcome, durationMs } : { job, outcome, error, durationMs },
    );
  }

  readonly #exec = (running: Running): void => {
    const error = this.#call(running);
    if (error !== WAITING) this.#handled(running, error);
  };

  /**
   * Calls the handler: what it threw, SUCCEEDED, or WAITING while its promise runs (raced with the
   * run's abort, see #abort).
   */
  #call(running: Running): unknown {
    const { job } = running;
    this.#hook('onJobStart', job);
    const handler = this.#o.handlers[job.task];
    // The processing span (OpenTelemetry), linked to the enqueuing one; undefined when nothing records.
    const span = this.#settings.telemetry.process(job);
    running.span = span;
    if (handler === undefined) return new Error(`no handler for task "${job.task}"`);
    // A job enqueued from SQL: its payload meets the task's schema now. One that does not fails alone,
    // dead at once (another attempt would read the same payload), with the schema's issues as its error.
    let run = job;
    if (uncheckedPayloads.has(job)) {
      const checked = checkedJob(job, this.#settings.schemaOf(job.task));
      if (checked.isErr()) {
        running.final = true;
        return checked.error;
      }
      run = checked.value;
    }
    const ms = this.#o.handlerTimeout;
    if (ms !== undefined) running.timer = setTimeout(() => this.#timedOut(running, ms), ms);
    let result: unknown;
    try {
      const context = new RunContext(
        running,
        this.#store,
        this.#settings,
        this.#o.progressIntervalMs,
        this.#lost,
      );
      result = span === undefined ? handler(run, context) : span.run(() => handler(run, context));
    } catch (e) {
      return e;
    }
    // A synchronous handler is done already.
    if (typeof (result as PromiseLike<unknown> | undefined)?.then !== 'function')
      return running.why === undefined ? SUCCEEDED : running.reason;
    if (!holdsJob(running.why)) return running.reason;
    running.waiting = true;
    (result as PromiseLike<unknown>).then(
      () => this.#guard(running, this.#succeeded),
      (e: unknown) => this.#guard(running, (r) => this.#handled(r, e)),
    );
    return WAITING;
  }

  readonly #succeeded = (running: Running): void => this.#handled(running, SUCCEEDED);

  /**
   * The handler's part is over with `error` (SUCCEEDED when it succeeded): free the slot (the settle
   * is batched and fenced; the slot does not wait for it), then settle. Only the first call counts.
   */
  #handled(running: Running, error: unknown): void {
    if (running.handled) return;
    running.handled = true;
    running.waiting = false;
    clearTimeout(running.timer);
    running.durationMs = Date.now() - running.startedAt;
    this.#free(running.job.id);
    // The last progress goes before the settle (kept for a retry, copied to the archive), unless the job
    // is no longer ours to write.
    const progress = running.progress;
    if (progress === undefined) this.#afterProgress(running, error);
    else if (running.completedInTx || (running.why !== undefined && running.why !== 'timeout')) {
      progress.close();
      this.#afterProgress(running, error);
    } else {
      progress.flush().then(
        () => {
          // The run is over: a report made now (by a callback the handler left behind) is not written.
          progress.close();
          this.#guard(running, (r) => this.#afterProgress(r, error));
        },
        (e: unknown) => {
          // A defect in the writer: reported, and the run ends (its slot is free already).
          this.#events.onError(e, 'worker');
          this.#finish(running);
        },
      );
    }
  }

  /** The run's progress is written: its outcome, or its settle. */
  #afterProgress(running: Running, error: unknown): void {
    if (running.completedInTx) this.#ended(running, 'completed');
    else if (running.why === 'stop') {
      this.#released.push(running.job);
      this.#ended(running, 'released');
    } else if (running.why === 'cancelled') this.#ended(running, 'cancelled', running.reason);
    else if (running.why === 'lost') this.#ended(running, 'lost', new LeaseLost(running.job.id));
    // Past its timeout the attempt fails with the timeout, whatever the handler returned or threw since.
    else this.#settle(running, running.why === 'timeout' ? running.reason : error);
  }

  /**
   * The heartbeat or the run's ProgressWriter found the job's lease lost: the run is aborted as lost. One
   * past its timeout or aborted by a stopping worker has its signal aborted already and still waits for its
   * handler: it ends lost when the handler returns, nothing written.
   */
  readonly #lost = (running: Running): void => {
    if (running.why === undefined) this.#abort(running, 'lost', new LeaseLost(running.job.id));
    else if (holdsJob(running.why)) running.why = 'lost';
  };

  /** Writes the run's completion or failure (batched, fenced). */
  #settle(running: Running, error: unknown): void {
    let failure = error;
    if (failure === SUCCEEDED && running.txCalls > 0)
      failure = running.txError ?? new Error('transaction did not complete the job');
    if (failure === SUCCEEDED) {
      this.#batcher.complete(running.job, running, this.#completed);
      return;
    }
    running.failure = failure;
    this.#batcher.fail(
      { job: running.job, error: errorText(failure), final: running.final === true },
      running,
      this.#failed,
    );
  }

  readonly #completed = (outcome: SettleOutcome<'completed'>, running: Running): void => {
    try {
      if (outcome.isOk()) this.#ended(running, 'completed');
      else this.#settleError(running, outcome.error);
    } catch (e) {
      this.#events.onError(e, 'worker');
    }
  };

  readonly #failed = (outcome: SettleOutcome<FailResult>, running: Running): void => {
    try {
      if (outcome.isErr()) this.#settleError(running, outcome.error);
      else this.#ended(running, outcome.value.state === 'dead' ? 'dead' : 'failed', running.failure);
    } catch (e) {
      this.#events.onError(e, 'worker');
    }
  };

  #settleError(running: Running, error: LeaseLost | DatabaseFailure): void {
    if (error.kind !== 'LeaseLost') this.#events.onError(error, 'settle');
    this.#ended(running, error.kind === 'LeaseLost' ? 'lost' : 'unsettled', error);
  }

  /** The run is over: its outcome reported, its count dropped. */
  #ended(running: Running, outcome: JobOutcome, error?: unknown): void {
    try {
      running.span?.end(outcome, error);
      this.#end(running.job, running.durationMs, outcome, error);
    } finally {
      this.#finish(running);
    }
  }

  #finish(running: Running): void {
    if (running.finished) return;
    running.finished = true;
    this.#free(running.job.id);
    if (--this.#runs === 0) for (const resolve of this.#onIdle.splice(0)) resolve();
  }
}
