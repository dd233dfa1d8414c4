import type { Job } from '../job.js';
import type { ClaimStore, LeaseStore } from '../store/job-store.js';
import type { Wakeup } from '../wakeup.js';
import type { BufferedJob } from './handler-runner.js';
import type { TakeOverParams } from './settle-batcher.js';
import type { WorkerPhase } from './work-options.js';

/** What the job supply needs of the handlers: how many run now, and starting one. */
export interface HandlerSlots {
  /** Handlers running now. */
  readonly size: number;
  /** Starts a handler for `job` (its lease last extended at `lastExtendAt`). */
  start(job: Job, lastExtendAt: number): void;
}

/** How a job supply claims: the worker's parsed options. */
export interface JobSupplyOptions {
  /** Handler slots. */
  readonly concurrency: number;
  /** Largest claim. */
  readonly batch: number;
  /** The local queue beyond the slots: a fixed size, or 'auto' (adapts to the backlog). */
  readonly prefetch: number | 'auto';
  /** Longest wait between claims when nothing wakes the supply (ms). */
  readonly pollInterval: number;
  /** The lease of each claimed job (ms). */
  readonly leaseMs: number;
  /** The tasks this worker claims (the worker's own list, passed to every claim as it is). */
  readonly tasks: string[];
  /** The queue's claims are limited (groups, task rates): a short claim does not mean an empty backlog. */
  readonly limited: boolean;
  /** No local queue at all (a queue with rate limits): claims ask for free slots only, with no probe. */
  readonly noLocalQueue: boolean;
}

/** What the job supply reports to its worker. */
export interface JobSupplyEvents {
  /** Whether the worker is stopping (nothing new is claimed or started then). */
  stopping(): boolean;
  /** A job was started. */
  started(): void;
  /** Jobs were given back unstarted (claimed or taken over while the worker stopped). */
  released(count: number): void;
  /** A recurring phase failed; returns the length of its failure streak. */
  failed(error: unknown, phase: WorkerPhase): number;
  /** A recurring phase worked again. */
  worked(phase: WorkerPhase, back: string): void;
  /** A one-off error (a release that failed). */
  error(error: unknown, phase: WorkerPhase): void;
  /** Keeps a task that never rejects for stop() to wait for. */
  inBackground(task: Promise<void>): void;
}

/**
 * Where a worker's jobs come from: claims and the take-overs of completions feed one local queue, which
 * feeds the handler slots. It owns the claim loop, the local queue, its size (adapted to the backlog
 * with prefetch 'auto') and the room reserved for take-overs in flight; the worker owns the lifecycle.
 *
 * @example
 * const supply = new JobSupply(queue, runner, { concurrency: 8, batch: 50, prefetch: 'auto', pollInterval: 1000, leaseMs: 30_000, tasks: ['email'], limited: false, noLocalQueue: false }, wake, slot, events);
 * const loop = supply.claimLoop();
 */
export class JobSupply {
  readonly #store: ClaimStore & Pick<LeaseStore, 'release'>;
  readonly #slots: HandlerSlots;
  readonly #o: JobSupplyOptions;
  /** Woken by NOTIFY, a reap that requeued jobs, and stop: a claim may find jobs now. */
  readonly #wake: Wakeup;
  /** Woken when a handler slot frees (and on stop). */
  readonly #slot: Wakeup;
  readonly #events: JobSupplyEvents;
  readonly #buffer: BufferedJob[] = [];
  /** Jobs held beyond the handler slots (the local queue's target); adapts when prefetch is 'auto'. */
  #prefetch: number;
  /** Room reserved for the jobs completions in flight may take over (see takeOverParams). */
  #reserved = 0;

  /** Claims nothing until {@link JobSupply.claimLoop} runs. */
  constructor(
    store: ClaimStore & Pick<LeaseStore, 'release'>,
    slots: HandlerSlots,
    options: JobSupplyOptions,
    wake: Wakeup,
    slot: Wakeup,
    events: JobSupplyEvents,
  ) {
    this.#store = store;
    this.#slots = slots;
    this.#o = options;
    this.#wake = wake;
    this.#slot = slot;
    this.#events = events;
    this.#prefetch = options.prefetch === 'auto' || options.noLocalQueue ? 0 : options.prefetch;
  }

  /**
   * The local queue: jobs claimed and not started yet. The heartbeat extends their leases too, and drops
   * from it those whose lease was lost before they started.
   */
  get buffered(): BufferedJob[] {
    return this.#buffer;
  }

  /** Empties the local queue and returns its jobs (a stopping worker gives them back). */
  takeBuffered(): Job[] {
    return this.#buffer.splice(0).map((b) => b.job);
  }

  /** Drops a cancelled job that has not started; false when it is not in the local queue. */
  dropBuffered(id: string): boolean {
    const at = this.#buffer.findIndex((b) => b.job.id === id);
    if (at < 0) return false;
    this.#buffer.splice(at, 1);
    this.slotFree();
    return true;
  }

  /** Jobs held now: running plus buffered, plus the room reserved for completions' take-overs. */
  get #held(): number {
    return this.#slots.size + this.#buffer.length + this.#reserved;
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
    const probe = this.#o.prefetch === 'auto' && this.#prefetch === 0 && !this.#o.noLocalQueue ? 1 : 0;
    return Math.min(this.#o.batch, free + probe);
  }

  /** A handler slot freed: start the next buffered jobs, and wake the claim loop if a claim is due. */
  slotFree(): void {
    this.#drain();
    if (this.#events.stopping() || this.#want() > 0) this.#slot.wake();
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
    if (this.#o.prefetch !== 'auto' || this.#o.noLocalQueue) return;
    if (!this.#o.limited) {
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

  /** Claims while the worker runs: for the free slots and the local queue, waiting when neither has room. */
  async claimLoop(): Promise<void> {
    while (!this.#events.stopping()) {
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
        const r = await this.#store.claimBatch({ batch: want, lease: this.#o.leaseMs, tasks: this.#o.tasks });
        if (r.isErr()) throw r.error;
        claimed = r.value.jobs;
        rateWaitMs = r.value.waitMs;
        this.#events.worked('claim', 'claims work again');
      } catch (e) {
        const failures = this.#events.failed(e, 'claim');
        // Back off on a failing database (bounded), but wake on stop.
        await this.#wake.wait(Math.min(this.#o.pollInterval, 100 * 2 ** Math.min(failures, 5)));
        continue;
      }
      if (this.#events.stopping()) {
        const released = await this.#store.release(claimed);
        if (released.isErr()) this.#events.error(released.error, 'release');
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
  takeOverParams(grouped: number): TakeOverParams | undefined {
    if (this.#events.stopping()) return undefined;
    const room = Math.min(grouped, this.#o.concurrency + this.#prefetch - this.#held);
    if (room <= 0) return undefined;
    this.#reserved += room;
    return { lease: this.#o.leaseMs, tasks: this.#o.tasks, max: room };
  }

  /**
   * Jobs a completion took over (their groups' next jobs, leased to this worker): into the local queue,
   * like claimed jobs, and the room reserved for them is free again. A completion that was already on
   * its way when stop() began gives them back.
   */
  taken(jobs: Job[], params: TakeOverParams): void {
    this.#reserved -= params.max;
    this.#adaptToTakeOver();
    if (this.#events.stopping()) {
      this.#events.released(jobs.length);
      this.#events.inBackground(
        this.#store.release(jobs).match(
          () => undefined,
          (e) => this.#events.error(e, 'release'),
        ),
      );
      return;
    }
    const now = Date.now();
    for (const job of jobs) this.#buffer.push({ job, lastExtendAt: now });
    // Runs them, and wakes the claim loop if the room not taken over is free for a claim now.
    this.slotFree();
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
    else if (this.#slots.size < this.#o.concurrency) this.#growLocalQueue();
  }

  /** Starts buffered jobs while handler slots are free. */
  #drain(): void {
    while (!this.#events.stopping() && this.#slots.size < this.#o.concurrency) {
      const next = this.#buffer.shift();
      if (next === undefined) return;
      this.#events.started();
      this.#slots.start(next.job, next.lastExtendAt);
    }
  }
}
