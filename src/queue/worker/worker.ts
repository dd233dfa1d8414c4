import { LogSink } from '../../observability/log-sink.js';
import { parseOptions } from '../queue-options.js';
import { ScheduleLoop } from '../schedules/schedule-loop.js';
import type { TaskMap } from '../store/job-store.js';
import { Wakeup } from '../wakeup.js';
import { gaugeReading } from './gauge-reading.js';
import { HandlerRunner, type Running } from './handler-runner.js';
import { JobListener } from './job-listener.js';
import { JobSupply } from './job-supply.js';
import { SettleBatcher } from './settle-batcher.js';
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
import type { WorkerPort } from './worker-port.js';

/**
 * A running worker (from `queue.work()`). Its `JobSupply` claims batches for its free slots and, under a
 * backlog, for a local queue that grows with it (`prefetch: 'auto'`), and takes in the jobs completions
 * take over; a `HandlerRunner` runs the
 * handlers and their heartbeat; a `SettleBatcher` writes completions and failures in batches; a
 * `JobListener` LISTENs on a connection of its own (plus a polling backstop); the reaper runs on
 * a timer; stop() works in two phases and never gives back a job whose handler still runs. Never
 * produces an unhandled rejection: errors go to hooks.
 *
 * @example
 * const worker = queue.work({ email: async (job) => send(job.payload) }, { concurrency: 8, listen: true });
 * process.once('SIGTERM', () => void worker.stop());
 * await worker.done;
 */
export class QueueWorker<T extends TaskMap = TaskMap> {
  /** Resolves when the worker has fully stopped (after stop(), or the signal's abort). */
  readonly done: Promise<void>;
  readonly #store: WorkerPort['store'];
  readonly #upkeep: WorkerPort['upkeep'];
  /** The NOTIFY channel of the queue (named in the log lines). */
  readonly #channel: string;
  readonly #o: WorkOptions;
  readonly #leaseMs: number;
  readonly #tasks: string[];
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
  /** Claims and take-overs feeding the local queue and the handler slots. */
  readonly #supply: JobSupply;
  #stopping = false;
  #stopPromise: Promise<void> | undefined;
  #resolveDone: () => void = () => {};
  #loopDone: Promise<void> = Promise.resolve();

  /** Use `queue.work(handlers, options)`. Throws InvalidOptions on invalid options (a defect). */
  constructor(port: WorkerPort, handlers: WorkHandlers<T>, options: WorkOptionsInput) {
    const parsed = parseOptions(workOptionsSchema, options);
    if (parsed.isErr()) throw parsed.error;
    this.#o = parsed.value;
    const { store, settings, upkeep } = port;
    this.#store = store;
    this.#upkeep = upkeep;
    this.#channel = settings.channel;
    this.#log = new LogSink(settings.logger, 'pg-txkit queue worker');
    this.#leaseMs = this.#o.lease ?? settings.leaseMs;
    // A queue with rate limits holds no local queue: a rate counts claims, and jobs claimed ahead of
    // free slots waited locally and then started in bursts (15 starts in one second against a limit of
    // 10, 6 against 4). Each claim asks for the free slots only, so a claimed job starts at once.
    const byTask = handlers as Readonly<Record<string, JobHandler<unknown> | undefined>>;
    // A task whose `requires` this worker lacks is not claimed at all (the claim filters by task): a
    // process without the publishing credential once took the day's job and then could not publish.
    const have = new Set(this.#o.capabilities);
    const skipped: SkippedTask[] = [];
    this.#tasks = [];
    for (const task of Object.keys(byTask).filter((t) => typeof byTask[t] === 'function')) {
      const missing = (Object.hasOwn(settings.requires, task) ? (settings.requires[task] ?? []) : []).filter(
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
      takeOver: settings.takesOver
        ? {
            params: (grouped) => this.#supply.takeOverParams(grouped),
            taken: (jobs, params) => this.#supply.taken(jobs, params),
          }
        : undefined,
    });
    this.#runner = new HandlerRunner(
      store,
      settings,
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
        onSlotFree: () => this.#supply.slotFree(),
        onOutcome: (outcome: JobOutcome) => {
          this.#counters[outcome]++;
        },
        onError: (e, phase) => this.#error(e, phase),
      },
    );
    this.#supply = new JobSupply(
      store,
      this.#runner,
      {
        concurrency: this.#o.concurrency,
        batch: this.#o.batch,
        prefetch: this.#o.prefetch,
        pollInterval: this.#o.pollInterval,
        leaseMs: this.#leaseMs,
        tasks: this.#tasks,
        limited: settings.limited,
        noLocalQueue: settings.rated,
      },
      this.#wake,
      this.#slot,
      {
        stopping: () => this.#stopping,
        started: () => {
          this.#counters.started++;
        },
        released: (count) => {
          this.#counters.released += count;
        },
        failed: (e, phase) => this.#failed(e, phase),
        worked: (phase, back) => this.#worked(phase, back),
        error: (e, phase) => this.#error(e, phase),
        inBackground: (task) => this.#inBackground(task),
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
    if (this.#o.schedules && upkeep.declaredSchedules.length > 0) {
      this.#scheduler = new ScheduleLoop({
        pass: (o) => upkeep.fireSchedules(o),
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
        connection: settings.pool.options,
        channel: settings.channel,
        cancelChannel: settings.cancelChannel,
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
    this.#unobserve = settings.telemetry.observe(() => gaugeReading(upkeep));
    // The loop may not end in an unhandled rejection: a defect is reported and stops the worker.
    this.#loopDone = this.#supply.claimLoop().catch((e: unknown) => {
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
   * settles. 2: abort the handlers still running (their `signal`) and wait for them (up to `graceMs`
   * more); a job goes back to pending without charging the attempt only once its handler has returned
   * (never while it still runs: another worker would run the job at the same time). A handler still
   * running after that is left to its lease: its job stays leased, no longer heartbeated, until the lease
   * lapses and the reaper gives it back; it ends `unsettled` and a warn line names its
   * job (in `pg-txkit worker`, the process exits after stop() and the handler with it). Then wait for a
   * heartbeat, reap or prune already under way (up to `graceMs` more: one waiting for a pool client the
   * user holds does not hold stop() forever), so that no statement of this worker holds a pool client
   * once stop() has resolved, and close the LISTEN connection. Idempotent; always resolves, within about
   * three times `graceMs`.
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
      const buffered = this.#supply.takeBuffered();
      if (buffered.length > 0) {
        this.#counters.released += buffered.length;
        const released = await this.#store.release(buffered);
        if (released.isErr()) this.#error(released.error, 'release');
      }
      while (this.#runner.size > 0 && Date.now() < deadline) await this.#slot.wait(deadline - Date.now());
      if (this.#runner.size > 0) await this.#abortRunning();
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

  /**
   * Phase 2 of stop(): aborts the running handlers' signals and waits for them, up to `graceMs`; a job
   * goes back to pending only once its handler has returned. Released while its handler still ran (a
   * handler awaiting a call that takes no signal), the job was claimed and run by another worker at the
   * same time. A handler still running after that wait is left to its lease: its job stays leased, no
   * longer heartbeated, and the reaper gives it back once the lease lapses (the handler's late
   * `ctx.transaction` is fenced by the lease token); each ends `unsettled`, and one warn line names
   * the jobs.
   */
  async #abortRunning(): Promise<void> {
    this.#runner.abortForStop();
    const deadline = Date.now() + this.#o.graceMs;
    while (this.#runner.size > 0 && Date.now() < deadline) await this.#slot.wait(deadline - Date.now());
    const left = this.#runner.abandon();
    if (left.length > 0) {
      const ids = left.map((j) => j.id);
      this.#log.warn(
        'stop',
        { channel: this.#channel, jobIds: ids, graceMs: this.#o.graceMs },
        `${left.length} handler(s) still running after their signal was aborted and ${this.#o.graceMs} ms more: ` +
          `jobs ${ids.join(', ')} are left leased until their lease lapses (then the reaper gives them back; ` +
          'a late ctx.transaction of these handlers completes its job only while the lease holds)',
      );
    }
    const returned = this.#runner.takeReleased();
    if (returned.length === 0) return;
    const released = await this.#store.release(returned);
    if (released.isErr()) this.#error(released.error, 'release');
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
    const fields = { err: error, phase, channel: this.#channel, streak };
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

  async #heartbeat(): Promise<void> {
    try {
      const r = await this.#runner.heartbeat(this.#supply.buffered);
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
    if (this.#supply.dropBuffered(id)) this.#counters.cancelled++;
  }

  async #prune(retention: NonNullable<WorkOptions['retention']>): Promise<void> {
    if (this.#stopping) return;
    try {
      const { every: _every, ...options } = retention;
      const r = await this.#upkeep.prune(options);
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
