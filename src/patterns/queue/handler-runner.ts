import { err, errAsync, ok, ResultAsync } from 'neverthrow';
import {
  type DatabaseFailure,
  type InvalidOptions,
  JobCancelled,
  LeaseLost,
  PoolExhausted,
  type TxKitError,
} from '../../errors/errors.js';
import type { LogSink } from '../../observability/log-sink.js';
import { freeClients } from '../../tx/acquire-client.js';
import type { Tx } from '../../tx/types.js';
import { errorText } from './error-text.js';
import type { Job } from './job.js';
import type { JobStore } from './job-store.js';
import { progressJson } from './progress-json.js';
import { ProgressWriter } from './progress-writer.js';
import type { SettleBatcher } from './settle-batcher.js';
import type { JobContext, JobHandler, JobOutcome, WorkerHooks, WorkerPhase } from './work-options.js';

/** Thrown into a handler's signal when it runs past `handlerTimeout`. */
export class HandlerTimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`handler timed out after ${ms} ms`);
  }
  override get name(): string {
    return 'HandlerTimeout';
  }
}

type AbortWhy = 'timeout' | 'stop' | 'lost' | 'cancelled';

/** A job whose handler is running. */
interface Running {
  readonly job: Job;
  readonly startedAt: number;
  lastExtendAt: number;
  why: AbortWhy | undefined;
  reason: unknown;
  /** Created on the first read of `ctx.signal` (most handlers never read it). */
  controller: AbortController | undefined;
  /** Ends the wait for the handler when the run is aborted. */
  interrupt: ((reason: unknown) => void) | undefined;
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
  readonly #store: JobStore;
  readonly #progressIntervalMs: number;
  readonly #onLost: () => void;

  constructor(running: Running, store: JobStore, progressIntervalMs: number, onLost: () => void) {
    this.#running = running;
    this.#store = store;
    this.#progressIntervalMs = progressIntervalMs;
    this.#onLost = onLost;
  }

  progress(value: unknown): ResultAsync<void, LeaseLost | InvalidOptions | DatabaseFailure> {
    const json = progressJson(value);
    if (json.isErr()) return errAsync(json.error);
    const running = this.#running;
    // The job is no longer ours (cancelled, lease lost) or the run is over: nothing to write.
    if (running.why === 'cancelled' || running.why === 'lost' || running.completedInTx)
      return errAsync(new LeaseLost(running.job.id));
    const store = this.#store;
    // The write needs a pool client of its own. Awaited inside ctx.transaction while that transaction
    // holds the last free client (a pool of 1), it would wait on itself forever: refuse at once instead.
    if (running.txOpen > 0 && freeClients(store.pool) <= 0) {
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
      this.#onLost,
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
    const store = this.#store;
    running.txCalls++;
    running.txOpen++;
    // Through the TxManager's do(): its retries, propagation and fixes apply to the handler's transaction.
    const transaction = store.txManager.do(async (tx) => {
      const value = await fn(tx);
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
 * user's code: whatever it throws fails its job and never escapes; an aborted run (timeout, stop, lost
 * lease, cancel) stops waiting for it. A run's `ctx.progress` reports go through its own
 * {@link ProgressWriter}; the last one is written before the settle.
 *
 * @example
 * const runner = new HandlerRunner(queue, batcher, { handlers, leaseMs: 30_000, handlerTimeout: undefined, hooks: undefined, progressIntervalMs: 1000 }, events);
 * runner.start(job, Date.now());
 */
export class HandlerRunner {
  readonly #store: JobStore;
  readonly #batcher: SettleBatcher;
  readonly #o: HandlerRunnerOptions;
  readonly #events: HandlerRunnerEvents;
  readonly #running = new Map<string, Running>();
  /** Runs started and not yet ended (their settle written or given up); counted, not kept (hot path). */
  #runs = 0;
  readonly #onIdle: (() => void)[] = [];

  constructor(
    store: JobStore,
    batcher: SettleBatcher,
    options: HandlerRunnerOptions,
    events: HandlerRunnerEvents,
  ) {
    this.#store = store;
    this.#batcher = batcher;
    this.#o = options;
    this.#events = events;
  }

  /** Handlers running now. */
  get size(): number {
    return this.#running.size;
  }

  /** Starts `job`'s handler (on the next microtask). */
  start(job: Job, lastExtendAt: number): void {
    const running: Running = {
      job,
      startedAt: Date.now(),
      lastExtendAt,
      why: undefined,
      reason: undefined,
      controller: undefined,
      interrupt: undefined,
      completedInTx: false,
      txError: undefined,
      txCalls: 0,
      txOpen: 0,
      progress: undefined,
    };
    this.#running.set(job.id, running);
    this.#runs++;
    void this.#guarded(running);
  }

  /** Runs a job; never rejects (a defect in the runner is reported), always frees the slot. */
  async #guarded(running: Running): Promise<void> {
    try {
      await this.#run(running);
    } catch (e) {
      this.#events.onError(e, 'worker');
    } finally {
      this.#free(running.job.id);
      if (--this.#runs === 0) for (const resolve of this.#onIdle.splice(0)) resolve();
    }
  }

  /**
   * The job was cancelled (heard on the cancel channel): aborts its handler's signal with
   * {@link JobCancelled}; its settle is skipped (the job is gone). Returns whether it was running here.
   */
  cancel(id: string): boolean {
    const running = this.#running.get(id);
    if (running === undefined || running.completedInTx || running.why !== undefined) return false;
    this.#abort(running, 'cancelled', new JobCancelled(id));
    return true;
  }

  /** Aborts every running handler (forced stop) and returns their jobs, to be released. */
  abortAll(): Job[] {
    const jobs: Job[] = [];
    for (const r of this.#running.values()) {
      this.#abort(r, 'stop', new Error('worker stopping'));
      jobs.push(r.job);
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
   * one is dropped from `buffered`. Returns how many buffered jobs were dropped.
   */
  async heartbeat(buffered: BufferedJob[]): Promise<number> {
    const now = Date.now();
    const third = this.#o.leaseMs / 3;
    const due = [...this.#running.values()].filter(
      (r) => r.why === undefined && !r.completedInTx && now - r.lastExtendAt >= third,
    );
    const dueBuffered = buffered.filter((b) => now - b.lastExtendAt >= third);
    if (due.length === 0 && dueBuffered.length === 0) return 0;
    const r = await this.#store.extendMany(
      [...due.map((d) => d.job), ...dueBuffered.map((b) => b.job)],
      this.#o.leaseMs,
    );
    if (r.isErr()) {
      this.#events.onError(r.error, 'heartbeat');
      return 0;
    }
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
      else if (!d.completedInTx && this.#running.has(d.job.id))
        this.#abort(d, 'lost', new LeaseLost(d.job.id));
    }
    return dropped;
  }

  #timedOut(running: Running, ms: number): void {
    const { job } = running;
    this.#o.log?.warn(
      'handler-timeout',
      { jobId: job.id, task: job.task, attempt: job.attempts, timeoutMs: ms },
      `handler of job ${job.id} (${job.task}) ran past its ${ms} ms timeout: its signal is aborted and the attempt fails`,
    );
    this.#abort(running, 'timeout', new HandlerTimeoutError(ms));
  }

  #abort(running: Running, why: AbortWhy, reason: unknown): void {
    if (running.why !== undefined) return;
    running.why = why;
    running.reason = reason;
    running.controller?.abort(reason);
    running.interrupt?.(reason);
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
    this.#store.telemetry.processed(job.task, outcome, error);
    if (this.#o.hooks?.onJobEnd === undefined) return;
    this.#hook(
      'onJobEnd',
      error === undefined ? { job, outcome, durationMs } : { job, outcome, error, durationMs },
    );
  }

  /** Runs the handler; resolves to its error (undefined when it succeeded). */
  async #handle(running: Running, handler: JobHandler<unknown>): Promise<{ error: unknown } | undefined> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ms = this.#o.handlerTimeout;
    if (ms !== undefined) timer = setTimeout(() => this.#timedOut(running, ms), ms);
    try {
      const context = new RunContext(running, this.#store, this.#o.progressIntervalMs, () =>
        this.#abort(running, 'lost', new LeaseLost(running.job.id)),
      );
      const result = handler(running.job, context);
      // A synchronous handler is done already; a promise is raced with the run's abort.
      if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') {
        await new Promise<unknown>((resolve, reject) => {
          running.interrupt = reject;
          if (running.why !== undefined) reject(running.reason);
          (result as PromiseLike<unknown>).then(resolve, reject);
        });
      } else if (running.why !== undefined) {
        return { error: running.reason };
      }
      if (running.txCalls > 0 && !running.completedInTx) {
        return { error: running.txError ?? new Error('transaction did not complete the job') };
      }
      return undefined;
    } catch (e) {
      return { error: e };
    } finally {
      clearTimeout(timer);
      running.interrupt = undefined;
    }
  }

  async #run(running: Running): Promise<void> {
    // Start on a microtask: a synchronous handler must not run inside the claim loop's drain.
    await undefined;
    const { job } = running;
    this.#hook('onJobStart', job);
    const handler = this.#o.handlers[job.task];
    // The processing span (OpenTelemetry), linked to the enqueuing one; undefined when nothing records.
    const span = this.#store.telemetry.process(job);
    const failure =
      handler === undefined
        ? { error: new Error(`no handler for task "${job.task}"`) }
        : await (span === undefined
            ? this.#handle(running, handler)
            : span.run(() => this.#handle(running, handler)));
    const durationMs = Date.now() - running.startedAt;
    // The settle below is batched and fenced; the slot does not wait for it.
    this.#free(job.id);
    const end = (outcome: JobOutcome, error?: unknown) => {
      span?.end(outcome, error);
      this.#end(job, durationMs, outcome, error);
    };
    // The last progress goes before the settle (kept for a retry, copied to the archive), unless the job
    // is no longer ours to write.
    if (running.completedInTx || (running.why !== undefined && running.why !== 'timeout'))
      running.progress?.close();
    else {
      await running.progress?.flush();
      // A handler aborted by its timeout may still be running: its later reports are not written.
      running.progress?.close();
    }
    if (running.completedInTx) return end('completed');
    if (running.why === 'stop') return end('released');
    if (running.why === 'cancelled') return end('cancelled', running.reason);
    if (running.why === 'lost') return end('lost', new LeaseLost(job.id));
    if (failure === undefined) {
      const outcome = await this.#batcher.complete(job);
      if (outcome.isOk()) return end('completed');
      if (outcome.error.kind !== 'LeaseLost') this.#events.onError(outcome.error, 'settle');
      return end(outcome.error.kind === 'LeaseLost' ? 'lost' : 'unsettled', outcome.error);
    }
    const outcome = await this.#batcher.fail({ job, error: errorText(failure.error), final: false });
    if (outcome.isOk()) return end(outcome.value.state === 'dead' ? 'dead' : 'failed', failure.error);
    if (outcome.error.kind !== 'LeaseLost') this.#events.onError(outcome.error, 'settle');
    return end(outcome.error.kind === 'LeaseLost' ? 'lost' : 'unsettled', outcome.error);
  }
}
