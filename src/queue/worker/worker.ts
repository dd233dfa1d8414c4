import { LogSink } from '../../observability/log-sink.js';
import type { Job } from '../job.js';
import { parseOptions } from '../queue-options.js';
import { ScheduleLoop } from '../schedules/schedule-loop.js';
import type { JobStore, TaskMap } from '../store/job-store.js';
import { Wakeup } from '../wakeup.js';
import { gaugeReading } from './gauge-reading.js';
import { type BufferedJob, HandlerRunner, type Running } from './handler-runner.js';
import { JobListener } from './job-listener.js';
import { SettleBatcher, type TakeOverParams } from './settle-batcher.js';
import {
  type JobHandler,
  type JobOutcome,
  type SkippedTask,
  type WorkerCounters,
  type WorkerPhase,
  type WorkHandlers,
  type WorkOptions,
  type WorkOptionsInput,
  workOptionsSchema,
} from './work-options.js';

/**
 * A running worker (from `queue.work()`). Its claim loop takes batches for its free slots and, under a
 * backlog, for a local queue that grows with it (`prefetch: 'auto'`); a `HandlerRunner` runs the
 * handlers and their heartbeat; a `SettleBatcher` writes completions and failures in batches; a
 * `JobListener` LISTENs on a connection of its own (plus a polling backstop); the reaper runs on
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
  readonly #skipped: readonly SkippedTask[];
  readonly #scheduler: ScheduleLoop | undefined;
  /** The queue's logger, or the rate-limited console: errors are never silent. */
  readonly #log: LogSink;
  readonly #counters = {
    started: 0,
    completed: 0,
    failed: 0,
    dead: 0,
    lost: 0,
    cancelled: 0,
    released: 0,
    unsettled: 0,
    errors: 0,
  };
  readonly #timers: ReturnType<typeof setInterval>[] = [];
  #heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  /** Heartbeats, reaps and prunes the timers started and that have not ended: stop() waits for them. */
  readonly #background = new Set<Promise<void>>();
  #unobserve: () => void = () => {};
  /**
   * Failures in a row of each recurring phase (claim, heartbeat, reap, prune, LISTEN, scheduler) since it
   * last worked: a streak is logged once at error, its repeats at debug, its end at info (see #failed).
   */
  readonly #streaks = new Map<WorkerPhase, number>();
  /** The schedules stored by a newer version last reported (see #unreadableSchedules). */
  #unreadableSeen = { list: '', times: 0 };
  /** Jobs held beyond the handler slots (the local queue's target); adapts when prefetch is 'auto'. */
  #prefetch: number;
  /** No local queue at all (a queue with rate limits): prefetch stays 0 and a claim takes no probe job. */
  readonly #noLocalQueue: boolean;
  /** Room reserved for the jobs completions in flight may take over (see #takeOverParams). */
  #reserved = 0;
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
    this.#log = new LogSink(store.logger, 'pg-txkit queue worker');
    this.#leaseMs = this.#o.lease ?? store.leaseMs;
    // A queue with rate limits holds no local queue: a rate counts claims, and jobs claimed ahead of
    // free slots waited locally and then started in bursts (15 starts in one second against a limit of
    // 10, 6 against 4). Each claim asks for the free slots only, so a claimed job starts at once.
    this.#noLocalQueue = store.rated;
    this.#prefetch = this.#o.prefetch === 'auto' || this.#noLocalQueue ? 0 : this.#o.prefetch;
    const byTask = handlers as Readonly<Record<string, JobHandler<unknown> | undefined>>;
    // A task whose `requires` this worker lacks is not claimed at all (the claim filters by task): a
    // process without the publishing credential once took the day's job and then could not publish.
    const have = new Set(this.#o.capabilities);
    const skipped: SkippedTask[] = [];
    this.#tasks = [];
    for (const task of Object.keys(byTask).filter((t) => typeof byTask[t] === 'function')) {
      const missing = (Object.hasOwn(store.requires, task) ? (store.requires[task] ?? []) : []).filter(
        (c) => !have.has(c),
      );
      if (missing.length > 0) skipped.push({ task, missing });
      else this.#tasks.push(task);
    }
    this.#skipped = Object.freeze(skipped);
    if (skipped.length > 0) this.#hook(() => this.#o.hooks?.onTasksSkipped?.(this.#skipped));
    this.#batcher = new SettleBatcher<Running>(store, {
      enabled: this.#o.batchSettles,
      delayMs: this.#o.settleDelay,
      maxBatch: this.#o.maxSettleBatch,
      // With concurrency limits, a completion takes over the group slots it frees (completeAndTakeNext): a
      // serial group's next job goes to the worker that finished the one before, with no claim to find
      // it and no write to the group's row. Not while stopping: the worker takes nothing new then.
      takeOver: store.takesOver
        ? {
            params: (grouped) => this.#takeOverParams(grouped),
            taken: (jobs, params) => this.#taken(jobs, params),
          }
        : undefined,
    });
    this.#runner = new HandlerRunner(
      store,
      this.#batcher,
      {
        handlers: byTask,
        leaseMs: this.#leaseMs,
        handlerTimeout: this.#o.handlerTimeout,
        hooks: this.#o.hooks,
        progressIntervalMs: this.#o.progressInterval,
        log: this.#log,
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
    // The scheduler runs when the queue declares schedules, whatever this worker can claim (firing
    // enqueues; claiming is what requires capabilities). A queue without schedules runs none: no
    // statement a second, and no pass that could still hold a pool client when stop() returns. (A stored
    // schedule that no running replica declares is never fired; the next pass of a replica that declares
    // schedules marks it disabled.)
    if (this.#o.schedules && store.declaredSchedules.length > 0) {
      this.#scheduler = new ScheduleLoop({
        pass: (o) => store.fireSchedules(o),
        intervalMs: this.#o.scheduleInterval,
        livenessMs: this.#o.scheduleLiveness,
        onPass: (r) => {
          // A schedule the pass could not handle is a failure of this phase (one error line per streak,
          // also when the same schedule fails on every pass); a pass that handled every one ends it.
          if (r.failed.length === 0) this.#worked('schedule', 'scheduler passes work again');
          for (const f of r.failed) this.#failed(f, 'schedule', f.message);
          for (const f of r.fired) this.#hook(() => this.#o.hooks?.onScheduleFired?.(f));
          if (r.unreadable.length > 0) this.#unreadableSchedules(r.unreadable);
        },
        onError: (e) => this.#failed(e, 'schedule'),
      });
    }
    if (this.#tasks.length === 0 && this.#scheduler === undefined) {
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
    this.#scheduler?.start();
    if (this.#tasks.length === 0) return; // a scheduler only
    if (this.#o.listen) {
      this.#listener = new JobListener({
        connection: store.pool.options,
        channel: store.channel,
        cancelChannel: store.cancelChannel,
        onWake: () => this.#wake.wake(),
        onCancel: (id) => this.#cancelled(id),
        onError: (e, next) =>
          next === 'poll'
            ? this.#error(
                e,
                'listen',
                1,
                `LISTEN refused; the worker polls every ${this.#o.pollInterval} ms instead`,
              )
            : this.#failed(e, 'listen'),
        onListening: () => this.#worked('listen', 'LISTEN connection back'),
      });
      this.#listener.start();
    }
    // OpenTelemetry gauges of the queue's health while this worker runs (no-op without the API).
    this.#unobserve = store.telemetry.observe(() => gaugeReading(store));
    // The loop may not end in an unhandled rejection: a defect is reported and stops the worker.
    this.#loopDone = this.#claimLoop().catch((e: unknown) => {
      this.#error(e, 'worker');
      void this.stop();
    });
    // Ticks at lease/6, extending leases a third old: an extension is due at most half a lease in.
    const beat = Math.max(25, Math.floor(this.#leaseMs / 6));
    // The heartbeat goes on through a graceful stop (handlers still running); the other timers do not.
    this.#heartbeatTimer = setInterval(() => this.#inBackground(this.#heartbeat()), beat);
    this.#heartbeatTimer.unref?.();
    if (this.#o.reapInterval > 0)
      this.#timers.push(setInterval(() => this.#inBackground(this.#reap()), this.#o.reapInterval));
    const retention = this.#o.retention;
    if (retention !== undefined)
      this.#timers.push(setInterval(() => this.#inBackground(this.#prune(retention)), retention.every));
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

  /** Tasks with a handler that this worker does not claim, and the capabilities each lacks. */
  get skippedTasks(): readonly SkippedTask[] {
    return this.#skipped;
  }

  /** Counters so far (a snapshot). */
  get counters(): WorkerCounters {
    return { ...this.#counters };
  }

  /**
   * Stops in two phases. 1: stop claiming, let running handlers finish (up to `graceMs`), write their
   * settles. 2: abort the handlers still running (their `signal`) and release their jobs back to
   * pending without charging the attempt. Then wait for a heartbeat, reap or prune already under way
   * (up to `graceMs` more: one waiting for a pool client the user holds does not hold stop() forever),
   * so that no statement of this worker holds a pool client once stop() has resolved, and close the
   * LISTEN connection. Idempotent; always resolves.
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
    // A scheduler pass waiting for a pool client must not hold stop() either: raced with the grace below.
    const schedulerStopped = this.#scheduler?.stop() ?? Promise.resolve();
    try {
      const deadline = Date.now() + this.#o.graceMs;
      // A claim waiting for a pool slot (every client held by the user) must not hold stop() forever:
      // wait for it up to graceMs; if it lands later, the loop gives its jobs back itself.
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => {
        graceTimer = setTimeout(resolve, this.#o.graceMs);
      });
      await Promise.race([Promise.all([this.#loopDone, schedulerStopped]), grace]);
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
      this.#unobserve();
      await this.#backgroundEnded(this.#o.graceMs);
      await this.#listener?.stop();
    }
  }

  /** Keeps a timer's task (which never rejects) until it ends, for stop() to wait for. */
  #inBackground(task: Promise<void>): void {
    this.#background.add(task);
    void task.finally(() => this.#background.delete(task));
  }

  /** Resolves when the tasks under way have ended, or after `ms`. */
  async #backgroundEnded(ms: number): Promise<void> {
    if (this.#background.size === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    });
    await Promise.race([Promise.all(this.#background), timeout]);
    clearTimeout(timer);
  }

  /** Runs a user hook; one that throws is reported (phase 'hook') and does not break the worker. */
  #hook(call: () => void): void {
    try {
      call();
    } catch (e) {
      this.#error(e, 'hook');
    }
  }

  /** Reports an error: hooks.onError and the log (a streak's repeats at debug, after its first line). */
  #error(error: unknown, phase: WorkerPhase, streak = 1, message?: string): void {
    this.#counters.errors++;
    const fields = { err: error, phase, channel: this.#store.channel, streak };
    if (streak > 1) this.#log.debug(phase, fields, `${phase} failed again (${streak} in a row)`);
    else this.#log.error(phase, fields, message ?? `${phase} failed; the worker keeps trying`);
    try {
      this.#o.hooks?.onError?.(error, phase);
    } catch {
      // A throwing onError hook must not break the worker.
    }
  }

  /**
   * Reports a failure of a recurring phase (a claim, a heartbeat, a reap, a prune, the LISTEN connection,
   * a scheduler pass): the first of a streak at error, the repeats at debug with their `streak` number,
   * so a database down for minutes writes one error line per phase, not one per attempt. The hooks'
   * onError is called every time. Returns the streak's length.
   */
  #failed(error: unknown, phase: WorkerPhase, message?: string): number {
    const streak = (this.#streaks.get(phase) ?? 0) + 1;
    this.#streaks.set(phase, streak);
    this.#error(error, phase, streak, message);
    return streak;
  }

  /** A recurring phase worked: its failure streak, if any, ends with one info line (`back`: what works). */
  #worked(phase: WorkerPhase, back: string): void {
    const failures = this.#streaks.get(phase) ?? 0;
    if (failures === 0) return;
    this.#streaks.delete(phase);
    this.#log.info(phase, { phase, failures }, `${back} after ${failures} failures`);
  }

  /**
   * Schedules stored by a newer version: every declaring pass finds them again while that version runs,
   * so the same list is logged at error once, then at debug (an error line a second was a flood); a
   * different list is news. onError is called every time.
   */
  #unreadableSchedules(names: readonly string[]): void {
    const list = names.join(', ');
    const message = `schedules stored by a newer version, not fired here: ${list}`;
    this.#unreadableSeen = {
      list,
      times: list === this.#unreadableSeen.list ? this.#unreadableSeen.times + 1 : 1,
    };
    this.#error(new Error(message), 'schedule', this.#unreadableSeen.times, message);
  }

  /** Jobs held now: running plus buffered, plus the room reserved for completions' take-overs. */
  get #held(): number {
    return this.#runner.size + this.#buffer.length + this.#reserved;
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
    const probe = this.#o.prefetch === 'auto' && this.#prefetch === 0 && !this.#noLocalQueue ? 1 : 0;
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
   *
   * With limits (groups, task rates) a short claim does not mean the backlog ran dry: a job held in a
   * local queue is running as far as its group's limit goes, so local queues that together hold more
   * jobs than the groups have slots make every claim come back short. Dropping to 0 there, and back to
   * `batch` after the next full claim, swung between claims of one job and claims no group had room
   * for (measured: a third of the unlimited queue's throughput over 1,000 serial groups). So a limited
   * queue halves its local queue after a short claim and doubles it (from the handler count, at most
   * `batch`) after a full one: the workers settle on local queues the groups can hold.
   */
  #adapt(asked: number, got: number): void {
    if (this.#o.prefetch !== 'auto' || this.#noLocalQueue) return;
    if (!this.#store.limited) {
      this.#prefetch = got >= asked ? this.#o.batch : 0;
      return;
    }
    if (got >= asked) this.#growLocalQueue();
    else this.#prefetch >>= 1;
  }

  /** Doubles the local queue of a limited queue (prefetch 'auto'), from the handler count up to `batch`. */
  #growLocalQueue(): void {
    this.#prefetch = Math.min(this.#o.batch, Math.max(this.#o.concurrency, this.#prefetch * 2));
  }

  async #claimLoop(): Promise<void> {
    while (!this.#stopping) {
      const want = this.#want();
      if (want <= 0) {
        await this.#slot.wait(this.#o.pollInterval);
        // Let the other handlers that finished in the same tick free their slots: one bigger claim.
        await new Promise<void>((resolve) => setImmediate(resolve));
        continue;
      }
      let claimed: Job[];
      let rateWaitMs: number | undefined;
      try {
        const r = await this.#store.claimBatch({ batch: want, lease: this.#leaseMs, tasks: this.#tasks });
        if (r.isErr()) throw r.error;
        claimed = r.value.jobs;
        rateWaitMs = r.value.waitMs;
        this.#worked('claim', 'claims work again');
      } catch (e) {
        const failures = this.#failed(e, 'claim');
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
      // A short claim took every job it could: wait for a NOTIFY (an enqueue, or a settle freeing a slot
      // of a group with ready jobs), the poll interval, or the earliest rate window to free a place —
      // never a hot loop over jobs held back by their limits.
      if (claimed.length < want)
        await this.#wake.wait(Math.min(this.#o.pollInterval, Math.max(1, rateWaitMs ?? Infinity)));
    }
  }

  /**
   * What a completion of `grouped` jobs with a group may take over: this worker's tasks and lease, and
   * at most as many jobs as it frees slots and as the room its handlers and local queue have now (the
   * local queue's current size with prefetch 'auto', see #adaptToTakeOver), reserved until the completion
   * is back so that a claim meanwhile does not fill the same room. A worker thus holds no more groups'
   * next jobs than a claim would give it; the other freed slots go back to every worker. Nothing while
   * stopping.
   */
  #takeOverParams(grouped: number): TakeOverParams | undefined {
    if (this.#stopping) return undefined;
    const room = Math.min(grouped, this.#o.concurrency + this.#prefetch - this.#held);
    if (room <= 0) return undefined;
    this.#reserved += room;
    return { lease: this.#leaseMs, tasks: this.#tasks, max: room };
  }

  /**
   * Jobs a completion took over (their groups' next jobs, leased to this worker): into the local queue,
   * like claimed jobs, and the room reserved for them is free again. A completion that was already on
   * its way when stop() began gives them back.
   */
  #taken(jobs: Job[], params: TakeOverParams): void {
    this.#reserved -= params.max;
    this.#adaptToTakeOver();
    if (this.#stopping) {
      this.#counters.released += jobs.length;
      this.#inBackground(
        this.#store.release(jobs).match(
          () => undefined,
          (e) => this.#error(e, 'release'),
        ),
      );
      return;
    }
    const now = Date.now();
    for (const job of jobs) this.#buffer.push({ job, lastExtendAt: now });
    // Runs them, and wakes the claim loop if the room not taken over is free for a claim now.
    this.#slotFree();
  }

  /**
   * Adapts the local queue when a take-over arrives (prefetch 'auto'), by what happened during its round
   * trip. Jobs still waiting in the local queue: it was deeper than this worker's handlers could start
   * meanwhile, and each of those jobs holds its group's slot that another worker's idle handler could
   * use (with handlers that take time, a worker that kept its first local queue held most groups and
   * left the other worker idle), so it halves. Handlers idle and nothing waiting: it was too shallow
   * (no-op handlers outrun the round trip), so it doubles, from the handler count up to `batch`, as
   * after a full claim.
   */
  #adaptToTakeOver(): void {
    if (this.#o.prefetch !== 'auto') return;
    if (this.#buffer.length > 0) this.#prefetch >>= 1;
    else if (this.#runner.size < this.#o.concurrency) this.#growLocalQueue();
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
      const r = await this.#runner.heartbeat(this.#buffer);
      if (r.isErr()) return void this.#failed(r.error, 'heartbeat');
      if (r.value === undefined) return; // no lease was due: nothing sent, nothing learnt
      this.#counters.lost += r.value;
      this.#worked('heartbeat', 'heartbeats work again');
    } catch (e) {
      this.#failed(e, 'heartbeat');
    }
  }

  /** A job was cancelled (its id heard on the cancel channel): abort its handler, or drop it unstarted. */
  #cancelled(id: string): void {
    if (this.#runner.cancel(id)) return;
    const at = this.#buffer.findIndex((b) => b.job.id === id);
    if (at < 0) return;
    this.#buffer.splice(at, 1);
    this.#counters.cancelled++;
    this.#slotFree();
  }

  async #prune(retention: NonNullable<WorkOptions['retention']>): Promise<void> {
    if (this.#stopping) return;
    try {
      const { every: _every, ...options } = retention;
      const r = await this.#store.prune(options);
      if (r.isErr()) this.#failed(r.error, 'prune');
      else this.#worked('prune', 'prune works again');
    } catch (e) {
      this.#failed(e, 'prune');
    }
  }

  async #reap(): Promise<void> {
    if (this.#stopping) return;
    try {
      const r = await this.#store.reap();
      if (r.isErr()) return void this.#failed(r.error, 'reap');
      this.#worked('reap', 'reap works again');
      if (r.value.requeued > 0) this.#wake.wake();
    } catch (e) {
      this.#failed(e, 'reap');
    }
  }
}
