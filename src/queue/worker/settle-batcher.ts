import { err, ok, type Result } from 'neverthrow';
import { type DatabaseFailure, DbError, LeaseLost } from '../../errors/errors.js';
import type { ClaimedLease, Job } from '../job.js';
import type { CompleteManyResult, FailItem, FailResult, SettleStore } from '../store/job-store.js';

/** Outcome of one settle: the job's fate, or why it could not be settled. */
export type SettleOutcome<V> = Result<V, LeaseLost | DatabaseFailure>;

/** Called with a settle's outcome and the context it was asked with (no closure per job). */
export type Settled<V, C> = (outcome: SettleOutcome<V>, context: C) => void;

interface Waiting<I, V, C> {
  readonly item: I;
  readonly context: C;
  readonly then: Settled<V, C>;
}

/** One outcome object for every completed job: outcomes are immutable. */
const COMPLETED: SettleOutcome<'completed'> = ok('completed');

/** The lease, tasks and most jobs a completion may take over (see `completeAndTakeNext`). */
export interface TakeOverParams {
  lease: number;
  tasks: string[];
  max: number;
}

/** Options of {@link SettleBatcher}. */
export interface SettleBatcherOptions {
  /**
   * Collect settles for this many ms before writing. 0 (the worker's default): adaptive — the settles of
   * one tick go in one statement at once, and while a statement is in flight the next ones gather for
   * the statement that follows it, so the batch grows with the load and a lone settle waits for nothing.
   */
  readonly delayMs: number;
  /** Write at once when this many settles are waiting. */
  readonly maxBatch: number;
  /** false: one statement per settle (no batching). */
  readonly enabled: boolean;
  /**
   * A worker's hand-over of group slots (`completeAndTakeNext`): `params(grouped)` gives the lease, tasks
   * and most jobs a completion of `grouped` jobs with a group may take over, reserving that room
   * (undefined: complete only, e.g. while stopping or with no room); `taken(jobs, params)` is called
   * once per such completion, whatever its outcome, with the jobs taken over (to be run) and the params
   * it was given (to free the reservation).
   */
  readonly takeOver?:
    | {
        readonly params: (grouped: number) => TakeOverParams | undefined;
        readonly taken: (jobs: Job[], params: TakeOverParams) => void;
      }
    | undefined;
}

/**
 * Collects completions and failures for a few milliseconds and writes each kind in ONE statement
 * (`unnest` of ids and lease tokens), while reporting every job's own outcome — including `LeaseLost`
 * for a job whose lease was lost. Never rejects: database errors come back per job as values.
 *
 * Each settle is asked with a context and a callback, called once with the job's outcome and that
 * context: a worker settling thousands of jobs a second allocates no promise or closure per job.
 *
 * @example
 * const batcher = new SettleBatcher<string>(queue, { delayMs: 2, maxBatch: 500, enabled: true });
 * batcher.complete(job, 'ctx', (outcome, ctx) => console.log(ctx, outcome.isOk())); // Ok('completed') | Err(LeaseLost | ConnectionLost …)
 * await batcher.flush();
 */
export class SettleBatcher<C> {
  readonly #store: Pick<SettleStore, 'completeClaimed' | 'completeAndTakeNext' | 'failMany'>;
  readonly #options: SettleBatcherOptions;
  #completions: Waiting<ClaimedLease, 'completed', C>[] = [];
  #failures: Waiting<FailItem, FailResult, C>[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #immediate: ReturnType<typeof setImmediate> | undefined;
  readonly #inFlight = new Set<Promise<void>>();

  constructor(
    store: Pick<SettleStore, 'completeClaimed' | 'completeAndTakeNext' | 'failMany'>,
    options: SettleBatcherOptions,
  ) {
    this.#store = store;
    this.#options = options;
  }

  /** Completes a job (batched); `then(outcome, context)` once written. */
  complete(job: ClaimedLease, context: C, then: Settled<'completed', C>): void {
    this.#completions.push({ item: job, context, then });
    this.#schedule();
  }

  /** Fails a job (batched); `then(outcome, context)` once written. */
  fail(item: FailItem, context: C, then: Settled<FailResult, C>): void {
    this.#failures.push({ item, context, then });
    this.#schedule();
  }

  /** Writes everything waiting now and waits for every write in flight. */
  async flush(): Promise<void> {
    this.#write();
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
  }

  #schedule(): void {
    const waiting = this.#completions.length + this.#failures.length;
    if (!this.#options.enabled || waiting >= this.#options.maxBatch) {
      this.#write();
      return;
    }
    if (this.#options.delayMs > 0) {
      this.#timer ??= setTimeout(() => this.#write(), this.#options.delayMs);
      return;
    }
    // Adaptive: a statement in flight takes the next batch with it when it ends (see #track).
    if (this.#inFlight.size > 0) return;
    this.#immediate ??= setImmediate(() => this.#write());
  }

  #write(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    clearImmediate(this.#immediate);
    this.#immediate = undefined;
    const completions = this.#completions;
    const failures = this.#failures;
    this.#completions = [];
    this.#failures = [];
    if (completions.length > 0) this.#track(this.#writeCompletions(completions));
    if (failures.length > 0) this.#track(this.#writeFailures(failures));
  }

  #track(p: Promise<void>): void {
    this.#inFlight.add(p);
    void p.finally(() => {
      this.#inFlight.delete(p);
      // The settles that gathered while this statement ran go now, in one statement.
      if (this.#inFlight.size === 0 && this.#options.delayMs === 0) this.#write();
    });
  }

  async #writeCompletions(batch: Waiting<ClaimedLease, 'completed', C>[]): Promise<void> {
    let outcomes: (w: Waiting<ClaimedLease, 'completed', C>) => SettleOutcome<'completed'>;
    let taken: Job[] = [];
    let over: TakeOverParams | undefined;
    try {
      const jobs = new Array<ClaimedLease>(batch.length);
      for (let i = 0; i < batch.length; i++)
        jobs[i] = (batch[i] as Waiting<ClaimedLease, 'completed', C>).item;
      let grouped = 0;
      if (this.#options.takeOver !== undefined)
        for (let i = 0; i < jobs.length; i++) if ((jobs[i] as ClaimedLease).group !== null) grouped++;
      over = grouped === 0 ? undefined : this.#options.takeOver?.params(grouped);
      let r: Result<CompleteManyResult, LeaseLost | DatabaseFailure>;
      if (over === undefined) r = await this.#store.completeClaimed(jobs);
      else {
        const t = await this.#store.completeAndTakeNext(jobs, over);
        if (t.isOk()) {
          taken = t.value.next;
          r = ok(t.value);
        } else r = err(t.error);
      }
      if (r.isErr()) {
        const failure = err(r.error);
        outcomes = () => failure;
      } else if (r.value.completed.length === batch.length) {
        outcomes = () => COMPLETED; // all of them (the usual case): no lookup per job
      } else {
        const done = new Set(r.value.completed);
        outcomes = (w) => (done.has(w.item.id) ? COMPLETED : err(new LeaseLost(w.item.id)));
      }
    } catch (e) {
      const failure = err(new DbError(undefined, e instanceof Error ? e.message : String(e), e));
      outcomes = () => failure;
    }
    for (const w of batch) w.then(outcomes(w), w.context);
    if (over !== undefined) this.#options.takeOver?.taken(taken, over);
  }

  async #writeFailures(batch: Waiting<FailItem, FailResult, C>[]): Promise<void> {
    let outcomes: (w: Waiting<FailItem, FailResult, C>) => SettleOutcome<FailResult>;
    try {
      const r = await this.#store.failMany(batch.map((w) => w.item));
      if (r.isErr()) {
        const failure = err(r.error);
        outcomes = () => failure;
      } else {
        outcomes = (w) => {
          const outcome = r.value.get(w.item.job.id);
          return outcome === undefined ? err(new LeaseLost(w.item.job.id)) : ok(outcome);
        };
      }
    } catch (e) {
      const failure = err(new DbError(undefined, e instanceof Error ? e.message : String(e), e));
      outcomes = () => failure;
    }
    for (const w of batch) w.then(outcomes(w), w.context);
  }
}
