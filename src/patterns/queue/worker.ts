import { type BufferedJob, HandlerRunner, type Running } from './handler-runner.js';
import type { Job } from './job.js';
import { JobListener } from './job-listener.js';
import type { JobStore, TaskMap } from './job-store.js';
import { parseOptions } from './queue-options.js';
import { SettleBatcher } from './settle-batcher.js';
import { Wakeup } from './wakeup.js';
import {
  type JobHandler,
  type JobOutcome,
  type WorkerCounters,
  type WorkerPhase,
  type WorkHandlers,
  type WorkOptions,
  type WorkOptionsInput,
  workOptionsSchema,
} from './work-options.js';

/**
 * A running worker (from `queue.work()`). Its claim loop takes batches for its free slots and, under a
 * backlog, for a local queue that grows with it (`prefetch: 'auto'`); a {@link HandlerRunner} runs the
 * handlers and their heartbeat; a {@link SettleBatcher} writes completions and failures in batches; a
 * {@link JobListener} LISTENs on a connection of its own (plus a polling backstop); the reaper runs on
 * a timer; stop() works in two phases. Never produces an unhandled rejection: errors go to hooks.
 *
 * @example
 * const worker = queue.work({ email: async (job) => send(job.payload) }, { concurrency: 8, listen: true });
 * process.once('SIGTERM', () => void worker.stop());
 * await worker.done;
 */
export class QueueWorker<T extends TaskMap = TaskMap> {
  /** Resolves when the worker has fully stopped (after stop(), or the signal's abort). */
  readonly done: Promise<void>;
  readonly #store: JobStore;
  readonly #o: WorkOptions;
  readonly #leaseMs: number;
  readonly #tasks: string[];
  readonly #buffer: BufferedJob[] = [];
  readonly #wake = new Wakeup();
  readonly #slot = new Wakeup();
  readonly #batcher: SettleBatcher<Running>;
  readonly #runner: HandlerRunner;
  readonly #listener: JobListener | undefined;
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
  #heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  /** Jobs held beyond the handler slots (the local queue's target); adapts when prefetch is 'auto'. */
  #prefetch: number;
  #stopping = false;
  #stopPromise: Promise<void> | undefined;
  #resolveDone: () => void = () => {};
  #loopDone: Promise<void> = Promise.resolve();

  /** Use `queue.work(handlers, options)`. Throws InvalidOptions on invalid options (a defect). */
  constructor(store: JobStore, handlers: WorkHandlers<T>, options: WorkOptionsInput) {
    const parsed = parseOptions(workOptionsSchema, options);
    if (parsed.isErr()) throw parsed.error;
    this.#o = parsed.value;
    this.#store = store;
    this.#leaseMs = this.#o.lease ?? store.leaseMs;
    this.#prefetch = this.#o.prefetch === 'auto' ? 0 : this.#o.prefetch;
    const byTask = handlers as Readonly<Record<string, JobHandler<unknown> | undefined>>;
    this.#tasks = Object.keys(byTask).filter((t) => typeof byTask[t] === 'function');
    this.#batcher = new SettleBatcher<Running>(store, {
      enabled: this.#o.batchSettles,
      delayMs: this.#o.settleDelay,
      maxBatch: this.#o.maxSettleBatch,
    });
    this.#runner = new HandlerRunner(
      store,
      this.#batcher,
      {
        handlers: byTask,
        leaseMs: this.#leaseMs,
        handlerTimeout: this.#o.handlerTimeout,
        hooks: this.#o.hooks,
      },
      {
        onSlotFree: () => this.#slotFree(),
        onOutcome: (outcome: JobOutcome) => {
          this.#counters[outcome]++;
        },
        onError: (e, phase) => this.#error(e, phase),
      },
    );
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
        connection: store.pool.options,
        channel: store.channel,
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
    // Ticks at lease/6, extending leases a third old: an extension is due at most half a lease in.
    const beat = Math.max(25, Math.floor(this.#leaseMs / 6));
    // The heartbeat goes on through a graceful stop (handlers still running); the other timers do not.
    this.#heartbeatTimer = setInterval(() => void this.#heartbeat(), beat);
    this.#heartbeatTimer.unref?.();
    if (this.#o.reapInterval > 0)
      this.#timers.push(setInterval(() => void this.#reap(), this.#o.reapInterval));
    for (const t of this.#timers) t.unref?.();
  }

  /** Jobs whose handlers are running now. */
  get active(): number {
    return this.#runner.size;
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
   * pending without charging the attempt. Then close the LISTEN connection. Idempotent; always resolves.
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
      const deadline = Date.now() + this.#o.graceMs;
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
        const released = await this.#store.release(buffered);
        if (released.isErr()) this.#error(released.error, 'release');
      }
      while (this.#runner.size > 0 && Date.now() < deadline) await this.#slot.wait(deadline - Date.now());
      if (this.#runner.size > 0) {
        const released = await this.#store.release(this.#runner.abortAll());
        if (released.isErr()) this.#error(released.error, 'release');
      }
      await this.#runner.settled();
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

  /** Jobs held now: running plus buffered. */
  get #held(): number {
    return this.#runner.size + this.#buffer.length;
  }

  /**
   * How many jobs the next claim should ask for, or 0 to wait: the free handler slots plus the free
   * part of the local queue, once the local queue has drained to half (one big claim rather than many
   * small ones). With prefetch 'auto' at 0, an idle slot's claim asks for ONE job more than the free
   * slots: only a claim that comes back with that extra job shows a backlog beyond the slots.
   */
  #want(): number {
    const free = this.#o.concurrency + this.#prefetch - this.#held;
    const lowWater = Math.max(1, this.#prefetch >> 1);
    if (free < lowWater && !(free > 0 && this.#buffer.length === 0)) return 0;
    const probe = this.#o.prefetch === 'auto' && this.#prefetch === 0 ? 1 : 0;
    return Math.min(this.#o.batch, free + probe);
  }

  #slotFree(): void {
    this.#drain();
    if (this.#stopping || this.#want() > 0) this.#slot.wake();
  }

  /**
   * Adapts the local queue to the backlog (prefetch 'auto'): `batch` after a full claim, 0 after a
   * short one. A full claim (with the probe's extra job, see #want) means more jobs are waiting than the
   * free slots: take the whole local queue at once, as tuned by hand. A short claim took every job
   * that was free: holding more would only take jobs another worker could start now.
   */
  #adapt(asked: number, got: number): void {
    if (this.#o.prefetch !== 'auto') return;
    this.#prefetch = got >= asked ? this.#o.batch : 0;
  }

  async #claimLoop(): Promise<void> {
    let failures = 0;
    while (!this.#stopping) {
      const want = this.#want();
      if (want <= 0) {
        await this.#slot.wait(this.#o.pollInterval);
        // Let the other handlers that finished in the same tick free their slots: one bigger claim.
        await new Promise<void>((resolve) => setImmediate(resolve));
        continue;
      }
      let claimed: Job[];
      try {
        const r = await this.#store.claim({ batch: want, lease: this.#leaseMs, tasks: this.#tasks });
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
        const released = await this.#store.release(claimed);
        if (released.isErr()) this.#error(released.error, 'release');
        break;
      }
      this.#adapt(want, claimed.length);
      const now = Date.now();
      for (const job of claimed) this.#buffer.push({ job, lastExtendAt: now });
      this.#drain();
      if (claimed.length < want) await this.#wake.wait(this.#o.pollInterval);
    }
  }

  /** Starts buffered jobs while handler slots are free. */
  #drain(): void {
    while (!this.#stopping && this.#runner.size < this.#o.concurrency) {
      const next = this.#buffer.shift();
      if (next === undefined) return;
      this.#counters.started++;
      this.#runner.start(next.job, next.lastExtendAt);
    }
  }

  async #heartbeat(): Promise<void> {
    try {
      this.#counters.lost += await this.#runner.heartbeat(this.#buffer);
    } catch (e) {
      this.#error(e, 'heartbeat');
    }
  }

  async #reap(): Promise<void> {
    if (this.#stopping) return;
    try {
      const r = await this.#store.reap();
      if (r.isErr()) return this.#error(r.error, 'reap');
      if (r.value.requeued > 0) this.#wake.wake();
    } catch (e) {
      this.#error(e, 'reap');
    }
  }
}
