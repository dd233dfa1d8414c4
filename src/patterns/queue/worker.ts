import { err, ok, type ResultAsync } from 'neverthrow';
import { z } from 'zod/v4';
import { LeaseLost, type TxKitError } from '../../errors/errors.js';
import type { Tx } from '../../tx/types.js';
import type { Job } from './job.js';
import { JobListener } from './job-listener.js';
import type { PayloadOutput } from './payload-schema.js';
import type { Queue, TaskMap } from './queue.js';
import { errorText } from './queue.js';
import { durationSchema, parseOptions } from './queue-options.js';
import { SettleBatcher } from './settle-batcher.js';
import { Wakeup } from './wakeup.js';

/** What a handler gets besides its job. */
export interface JobContext {
  /**
   * Aborted when the handler times out (`handlerTimeout`), when the worker is forced to stop, or when
   * the heartbeat finds the lease lost. Pass it to fetch/HTTP clients.
   */
  readonly signal: AbortSignal;
  /**
   * Runs `fn(tx)` in ONE transaction together with this job's fenced completion: the handler's
   * database writes commit if and only if the job is completed, so they happen exactly once even if
   * the job is run again. If the lease was lost, the transaction rolls back and `LeaseLost` comes
   * back. Call it at most once per run; when it returns an `Err`, the job is failed.
   * External side effects (HTTP, e-mail) are at-least-once: make them idempotent.
   *
   * @example
   * const r = await ctx.transaction((tx) => tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [job.payload.orderId]));
   * if (r.isErr()) throw r.error;
   */
  transaction<R>(fn: (tx: Tx) => Promise<R> | R): ResultAsync<R, LeaseLost | TxKitError>;
}

/** A task handler: resolve to complete the job, throw (or reject) to fail it. */
export type JobHandler<P> = (job: Job<P>, context: JobContext) => unknown;

/** Task name → handler. The worker only claims tasks it has a handler for. */
export type WorkHandlers<T extends TaskMap> = { readonly [K in keyof T]?: JobHandler<PayloadOutput<T[K]>> };

/** How a job's run ended. */
export type JobOutcome = 'completed' | 'failed' | 'dead' | 'lost' | 'released' | 'unsettled';

/** Reported by {@link WorkerHooks.onJobEnd}. */
export interface JobEndEvent {
  readonly job: Job;
  /**
   * completed; failed (will retry); dead (attempts used up); lost (lease lost: someone else owns the
   * job now, nothing written); released (given back on a forced stop); unsettled (the settle could
   * not be written — the lease will expire and the reaper re-queues it).
   */
  readonly outcome: JobOutcome;
  /** The handler's error (failed/dead) or the settle's error (lost/unsettled). */
  readonly error?: unknown;
  /** Handler run time in ms. */
  readonly durationMs: number;
}

/** Where an error reported by {@link WorkerHooks.onError} happened. */
export type WorkerPhase =
  | 'claim'
  | 'settle'
  | 'heartbeat'
  | 'reap'
  | 'listen'
  | 'release'
  | 'hook'
  | 'worker';

/** Observability hooks. Errors thrown by hooks are caught (and reported to onError once). */
export interface WorkerHooks {
  /** An error outside handlers (database down, LISTEN lost …). The worker keeps going. */
  onError?(error: unknown, phase: WorkerPhase): void;
  /** A handler is about to run. */
  onJobStart?(job: Job): void;
  /** A job's run ended. */
  onJobEnd?(event: JobEndEvent): void;
}

/** Options of `queue.work()` (validated; the type comes from this schema). */
export const workOptionsSchema = z.strictObject({
  /** Handlers running at once. */
  concurrency: z.number().int().min(1).max(1000).default(4),
  /** Most jobs claimed per statement (the worker claims min(batch, free slots + free prefetch)). */
  batch: z.number().int().min(1).max(1000).default(16),
  /**
   * Jobs claimed ahead of free handler slots and held (leased, heartbeated) in a local buffer, so one
   * claim statement can feed many short handlers. 0 (default): claim only for free slots. Buffered jobs
   * are released at once on stop.
   */
  prefetch: z.number().int().min(0).max(10_000).default(0),
  /** Aborting it stops the worker gracefully (same as stop()). */
  signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal, 'an AbortSignal').optional(),
  /** Polling backstop: claim at least this often when idle (and the only wake-up without LISTEN). */
  pollInterval: durationSchema.default(1000),
  /** LISTEN for enqueue notifications on a dedicated pooled connection (false behind PgBouncer transaction pooling). */
  listen: z.boolean().default(true),
  /** Lease per claim (default: the queue's); the worker extends it while a handler runs. */
  lease: durationSchema.optional(),
  /** Abort a handler (signal) and fail its job after this long. */
  handlerTimeout: durationSchema.optional(),
  /** On stop, wait this long for running handlers, then abort them and release their jobs. */
  graceMs: durationSchema.default(10_000),
  /** Batch completions and failures into one statement each. */
  batchSettles: z.boolean().default(true),
  /** How long settles are collected before they are written. */
  settleDelay: durationSchema.default(2),
  /** Write settles at once when this many are waiting. */
  maxSettleBatch: z.number().int().min(1).max(10_000).default(500),
  /** Run the reaper this often (0: never; another worker or a cron must). */
  reapInterval: durationSchema.default(5000),
  /** Hooks for errors and job events. */
  hooks: z
    .custom<WorkerHooks>((v) => typeof v === 'object' && v !== null, 'an object of hook functions')
    .optional(),
});

/** Options of `queue.work()`. */
export type WorkOptionsInput = z.input<typeof workOptionsSchema>;
type WorkOptions = z.output<typeof workOptionsSchema>;

/** Counters of a worker's life so far. */
export interface WorkerCounters {
  readonly started: number;
  readonly completed: number;
  readonly failed: number;
  readonly dead: number;
  readonly lost: number;
  readonly released: number;
  readonly unsettled: number;
  readonly errors: number;
}

type AbortWhy = 'timeout' | 'stop' | 'lost';

interface Running {
  readonly job: Job;
  readonly controller: AbortController;
  readonly startedAt: number;
  lastExtendAt: number;
  why: AbortWhy | undefined;
  completedInTx: boolean;
  txError: unknown;
  txCalls: number;
}

/** Thrown into a handler's signal when it runs past `handlerTimeout`. */
export class HandlerTimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`handler timed out after ${ms} ms`);
  }
  override get name(): string {
    return 'HandlerTimeout';
  }
}

/**
 * A running worker (from `queue.work()`). It claims batches up to its free slots, runs handlers,
 * settles in batches, listens for NOTIFY (plus a polling backstop), extends leases of long handlers,
 * runs the reaper and stops in two phases. Never produces an unhandled rejection: errors go to hooks.
 *
 * @example
 * const worker = queue.work({ email: async (job) => send(job.payload) }, { concurrency: 8, listen: true });
 * process.once('SIGTERM', () => void worker.stop());
 * await worker.done;
 */
export class QueueWorker<T extends TaskMap = TaskMap> {
  /** Resolves when the worker has fully stopped (after stop(), or the signal's abort). */
  readonly done: Promise<void>;
  readonly #queue: Queue<T>;
  readonly #handlers: WorkHandlers<T>;
  readonly #o: WorkOptions;
  readonly #leaseMs: number;
  readonly #tasks: string[];
  readonly #running = new Map<string, Running>();
  readonly #buffer: { readonly job: Job; lastExtendAt: number }[] = [];
  readonly #wake = new Wakeup();
  readonly #slot = new Wakeup();
  readonly #batcher: SettleBatcher;
  readonly #counters = {
    started: 0,
    completed: 0,
    failed: 0,
    dead: 0,
    lost: 0,
    released: 0,
    unsettled: 0,
    errors: 0,
  };
  readonly #timers: ReturnType<typeof setInterval>[] = [];
  readonly #handlerRuns = new Set<Promise<void>>();
  #stopping = false;
  #stopPromise: Promise<void> | undefined;
  #resolveDone: () => void = () => {};
  #loopDone: Promise<void> = Promise.resolve();
  readonly #listener: JobListener | undefined;
  #heartbeatTimer: ReturnType<typeof setInterval> | undefined;

  /** Use `queue.work(handlers, options)`. Throws InvalidOptions on invalid options (a defect). */
  constructor(queue: Queue<T>, handlers: WorkHandlers<T>, options: WorkOptionsInput) {
    const parsed = parseOptions(workOptionsSchema, options);
    if (parsed.isErr()) throw parsed.error;
    this.#o = parsed.value;
    this.#queue = queue;
    this.#handlers = handlers;
    this.#leaseMs = this.#o.lease ?? queue.leaseMs;
    this.#tasks = Object.keys(handlers).filter(
      (t) => typeof (handlers as Record<string, unknown>)[t] === 'function',
    );
    this.#batcher = new SettleBatcher(queue as unknown as Queue, {
      enabled: this.#o.batchSettles,
      delayMs: this.#o.settleDelay,
      maxBatch: this.#o.maxSettleBatch,
    });
    this.done = new Promise<void>((resolve) => {
      this.#resolveDone = resolve;
    });
    if (this.#tasks.length === 0) {
      this.#stopping = true;
      this.#stopPromise = Promise.resolve();
      this.#resolveDone();
      return;
    }
    const signal = this.#o.signal;
    if (signal?.aborted) {
      void this.stop();
      return;
    }
    signal?.addEventListener('abort', () => void this.stop(), { once: true });
    if (this.#o.listen) {
      this.#listener = new JobListener({
        connection: queue.pool.options,
        channel: queue.channel,
        onWake: () => this.#wake.wake(),
        onError: (e) => this.#error(e, 'listen'),
      });
      this.#listener.start();
    }
    // The loop may not end in an unhandled rejection: a defect is reported and stops the worker.
    this.#loopDone = this.#claimLoop().catch((e: unknown) => {
      this.#error(e, 'worker');
      void this.stop();
    });
    const beat = Math.max(50, Math.floor(this.#leaseMs / 3));
    this.#heartbeatTimer = setInterval(() => void this.#heartbeat(), beat);
    this.#heartbeatTimer.unref?.();
    if (this.#o.reapInterval > 0)
      this.#timers.push(setInterval(() => void this.#reap(), this.#o.reapInterval));
    for (const t of this.#timers) t.unref?.();
  }

  /** Jobs whose handlers are running now. */
  get active(): number {
    return this.#running.size;
  }

  /** Whether the LISTEN connection is up (false in poll-only mode). */
  get listening(): boolean {
    return this.#listener?.listening ?? false;
  }

  /** Counters so far (a snapshot). */
  get counters(): WorkerCounters {
    return { ...this.#counters };
  }

  /**
   * Stops in two phases. 1: stop claiming, let running handlers finish (up to `graceMs`), write their
   * settles. 2: abort the handlers still running (their `signal`) and release their jobs back to
   * pending without charging the attempt. Then close the LISTEN connection. Idempotent.
   *
   * @example
   * await worker.stop();
   */
  stop(): Promise<void> {
    this.#stopPromise ??= this.#stop().finally(() => this.#resolveDone());
    return this.#stopPromise;
  }

  async #stop(): Promise<void> {
    this.#stopping = true;
    this.#wake.wake();
    this.#slot.wake();
    for (const t of this.#timers) clearInterval(t);
    try {
      // A claim waiting for a pool slot (every client held by the user) must not hold stop() forever:
      // wait for it up to graceMs; if it lands later, the loop gives its jobs back itself.
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => {
        graceTimer = setTimeout(resolve, this.#o.graceMs);
      });
      await Promise.race([this.#loopDone, grace]);
      clearTimeout(graceTimer);
      // Claimed but never started: give them back now.
      const buffered = this.#buffer.splice(0).map((b) => b.job);
      if (buffered.length > 0) {
        this.#counters.released += buffered.length;
        const released = await this.#queue.release(buffered);
        if (released.isErr()) this.#error(released.error, 'release');
      }
      const deadline = Date.now() + this.#o.graceMs;
      while (this.#running.size > 0 && Date.now() < deadline) await this.#slot.wait(deadline - Date.now());
      if (this.#running.size > 0) {
        const forced = [...this.#running.values()];
        for (const r of forced) {
          r.why ??= 'stop';
          r.controller.abort(new Error('worker stopping'));
        }
        const released = await this.#queue.release(forced.map((r) => r.job));
        if (released.isErr()) this.#error(released.error, 'release');
      }
      await Promise.all([...this.#handlerRuns]);
      clearInterval(this.#heartbeatTimer);
      await this.#batcher.flush();
    } catch (e) {
      this.#error(e, 'worker');
    } finally {
      clearInterval(this.#heartbeatTimer);
      await this.#listener?.stop();
    }
  }

  #error(error: unknown, phase: WorkerPhase): void {
    this.#counters.errors++;
    try {
      this.#o.hooks?.onError?.(error, phase);
    } catch {
      // A throwing onError hook must not break the worker.
    }
  }

  #hook<K extends 'onJobStart' | 'onJobEnd'>(name: K, arg: Parameters<NonNullable<WorkerHooks[K]>>[0]): void {
    try {
      (this.#o.hooks?.[name] as ((a: typeof arg) => void) | undefined)?.(arg);
    } catch (e) {
      this.#error(e, 'hook');
    }
  }

  async #claimLoop(): Promise<void> {
    let failures = 0;
    while (!this.#stopping) {
      const free = this.#o.concurrency + this.#o.prefetch - this.#running.size - this.#buffer.length;
      if (free <= 0) {
        await this.#slot.wait(this.#o.pollInterval);
        // Let the other handlers that finished in the same tick free their slots: one bigger claim.
        await new Promise<void>((resolve) => setImmediate(resolve));
        continue;
      }
      const want = Math.min(this.#o.batch, free);
      let claimed: Job[];
      try {
        const r = await this.#queue.claim({ batch: want, lease: this.#leaseMs, tasks: this.#tasks });
        if (r.isErr()) throw r.error;
        claimed = r.value;
        failures = 0;
      } catch (e) {
        this.#error(e, 'claim');
        failures++;
        // Back off on a failing database (bounded), but wake on stop.
        await this.#wake.wait(Math.min(this.#o.pollInterval, 100 * 2 ** Math.min(failures, 5)));
        continue;
      }
      if (this.#stopping) {
        const released = await this.#queue.release(claimed);
        if (released.isErr()) this.#error(released.error, 'release');
        break;
      }
      const now = Date.now();
      for (const job of claimed) this.#buffer.push({ job, lastExtendAt: now });
      this.#drain();
      if (claimed.length < want) await this.#wake.wait(this.#o.pollInterval);
    }
  }

  #start(job: Job, lastExtendAt: number): void {
    const now = Date.now();
    const running: Running = {
      job,
      controller: new AbortController(),
      startedAt: now,
      lastExtendAt,
      why: undefined,
      completedInTx: false,
      txError: undefined,
      txCalls: 0,
    };
    this.#running.set(job.id, running);
    this.#counters.started++;
    const p = this.#run(running)
      .catch((e: unknown) => this.#error(e, 'worker'))
      .finally(() => {
        this.#freeSlot(job.id);
        this.#handlerRuns.delete(p);
      });
    this.#handlerRuns.add(p);
  }

  /** The handler is over: its slot is free for the next job while its settle is being written. */
  #freeSlot(id: string): void {
    if (!this.#running.delete(id)) return;
    this.#drain();
    this.#slot.wake();
  }

  /** Starts buffered jobs while handler slots are free. */
  #drain(): void {
    while (!this.#stopping && this.#running.size < this.#o.concurrency) {
      const next = this.#buffer.shift();
      if (next === undefined) return;
      this.#start(next.job, next.lastExtendAt);
    }
  }

  #context(running: Running): JobContext {
    const { job } = running;
    const queue = this.#queue;
    return {
      signal: running.controller.signal,
      transaction: <R>(fn: (tx: Tx) => Promise<R> | R) => {
        running.txCalls++;
        const transaction = queue.txManager.do(async (tx) => {
          const value = await fn(tx);
          // The fenced completion, in the handler's transaction: both commit or neither does.
          return (await queue.completeWithin(tx, job)) ? ok(value) : err(new LeaseLost(job.id));
        }) as unknown as ResultAsync<R, LeaseLost | TxKitError>;
        return transaction
          .map((value) => {
            running.completedInTx = true;
            return value;
          })
          .mapErr((error) => {
            running.txError = error;
            return error;
          });
      },
    };
  }

  async #run(running: Running): Promise<void> {
    const { job, controller } = running;
    this.#hook('onJobStart', job);
    const handler = (this.#handlers as Record<string, JobHandler<unknown> | undefined>)[job.task];
    let failure: { error: unknown; final: boolean } | undefined;
    if (handler === undefined) {
      failure = { error: new Error(`no handler for task "${job.task}"`), final: false };
    } else {
      // The payload was validated by the task's schema at enqueue and stored as JSON.
      const typed = job;
      let timer: ReturnType<typeof setTimeout> | undefined;
      if (this.#o.handlerTimeout !== undefined) {
        const ms = this.#o.handlerTimeout;
        timer = setTimeout(() => {
          running.why ??= 'timeout';
          controller.abort(new HandlerTimeoutError(ms));
        }, ms);
      }
      const aborted = new Promise<never>((_, reject) => {
        const onAbort = () => reject(controller.signal.reason);
        if (controller.signal.aborted) onAbort();
        else controller.signal.addEventListener('abort', onAbort, { once: true });
      });
      const handled = Promise.resolve().then(() => handler(typed, this.#context(running)));
      // Neither loser of the race may become an unhandled rejection.
      aborted.catch(() => {});
      handled.catch(() => {});
      try {
        await Promise.race([handled, aborted]);
        if (running.txCalls > 0 && !running.completedInTx) {
          failure = {
            error: running.txError ?? new Error('transaction did not complete the job'),
            final: false,
          };
        }
      } catch (e) {
        failure = { error: e, final: false };
      } finally {
        clearTimeout(timer);
      }
    }
    const durationMs = Date.now() - running.startedAt;
    // The settle below is batched and fenced; the slot does not wait for it.
    this.#freeSlot(job.id);
    const end = (outcome: JobOutcome, error?: unknown) => {
      this.#counters[outcome]++;
      this.#hook(
        'onJobEnd',
        error === undefined ? { job, outcome, durationMs } : { job, outcome, error, durationMs },
      );
    };
    if (running.completedInTx) return end('completed');
    if (running.why === 'stop') return end('released');
    if (running.why === 'lost') return end('lost', new LeaseLost(job.id));
    if (failure === undefined) {
      const outcome = await this.#batcher.complete(job);
      if (outcome.isOk()) return end('completed');
      if (outcome.error.kind !== 'LeaseLost') this.#error(outcome.error, 'settle');
      return end(outcome.error.kind === 'LeaseLost' ? 'lost' : 'unsettled', outcome.error);
    }
    const outcome = await this.#batcher.fail({ job, error: errorText(failure.error), final: failure.final });
    if (outcome.isOk()) return end(outcome.value.state === 'dead' ? 'dead' : 'failed', failure.error);
    if (outcome.error.kind !== 'LeaseLost') this.#error(outcome.error, 'settle');
    return end(outcome.error.kind === 'LeaseLost' ? 'lost' : 'unsettled', outcome.error);
  }

  async #heartbeat(): Promise<void> {
    const now = Date.now();
    const due = [...this.#running.values()].filter(
      (r) => r.why === undefined && !r.completedInTx && now - r.lastExtendAt >= this.#leaseMs / 3,
    );
    const buffered = this.#buffer.filter((b) => now - b.lastExtendAt >= this.#leaseMs / 3);
    if (due.length === 0 && buffered.length === 0) return;
    try {
      const r = await this.#queue.extendMany(
        [...due.map((d) => d.job), ...buffered.map((b) => b.job)],
        this.#leaseMs,
      );
      if (r.isErr()) return this.#error(r.error, 'heartbeat');
      for (const b of buffered) {
        if (r.value.has(b.job.id)) b.lastExtendAt = now;
        else {
          // Lost before it started (cancelled, or reaped after a stall): drop it, nothing to undo.
          const at = this.#buffer.indexOf(b);
          if (at >= 0) {
            this.#buffer.splice(at, 1);
            this.#counters.lost++;
          }
        }
      }
      for (const d of due) {
        if (r.value.has(d.job.id)) d.lastExtendAt = now;
        else if (!d.completedInTx && this.#running.has(d.job.id)) {
          d.why ??= 'lost';
          d.controller.abort(new LeaseLost(d.job.id));
        }
      }
    } catch (e) {
      this.#error(e, 'heartbeat');
    }
  }

  async #reap(): Promise<void> {
    if (this.#stopping) return;
    try {
      const r = await this.#queue.reap();
      if (r.isErr()) return this.#error(r.error, 'reap');
      if (r.value.requeued > 0) this.#wake.wake();
    } catch (e) {
      this.#error(e, 'reap');
    }
  }
}
