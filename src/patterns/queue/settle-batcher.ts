import { err, ok, type Result } from 'neverthrow';
import { type DatabaseFailure, DbError, LeaseLost } from '../../errors/errors.js';
import type { JobLease } from './job.js';
import type { FailItem, FailResult, JobStore } from './job-store.js';

/** Outcome of one settle: the job's fate, or why it could not be settled. */
export type SettleOutcome<V> = Result<V, LeaseLost | DatabaseFailure>;

interface Waiting<I, V> {
  readonly item: I;
  readonly resolve: (outcome: SettleOutcome<V>) => void;
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
}

/**
 * Collects completions and failures for a few milliseconds and writes each kind in ONE statement
 * (`unnest` of ids and lease tokens), while reporting every job's own outcome — including `LeaseLost`
 * for a job whose lease was lost. Never rejects: database errors come back per job as values.
 *
 * @example
 * const batcher = new SettleBatcher(queue, { delayMs: 2, maxBatch: 500, enabled: true });
 * const outcome = await batcher.complete(job); // Ok('completed') | Err(LeaseLost | ConnectionLost …)
 * await batcher.flush();
 */
export class SettleBatcher {
  readonly #store: Pick<JobStore, 'completeMany' | 'failMany'>;
  readonly #options: SettleBatcherOptions;
  #completions: Waiting<JobLease, 'completed'>[] = [];
  #failures: Waiting<FailItem, FailResult>[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #immediate: ReturnType<typeof setImmediate> | undefined;
  readonly #inFlight = new Set<Promise<void>>();

  constructor(store: Pick<JobStore, 'completeMany' | 'failMany'>, options: SettleBatcherOptions) {
    this.#store = store;
    this.#options = options;
  }

  /** Completes a job (batched). */
  complete(job: JobLease): Promise<SettleOutcome<'completed'>> {
    return new Promise((resolve) => {
      this.#completions.push({ item: job, resolve });
      this.#schedule();
    });
  }

  /** Fails a job (batched). */
  fail(item: FailItem): Promise<SettleOutcome<FailResult>> {
    return new Promise((resolve) => {
      this.#failures.push({ item, resolve });
      this.#schedule();
    });
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

  async #writeCompletions(batch: Waiting<JobLease, 'completed'>[]): Promise<void> {
    try {
      const r = await this.#store.completeMany(batch.map((w) => w.item));
      if (r.isErr()) {
        for (const w of batch) w.resolve(err(r.error));
        return;
      }
      const done = new Set(r.value.completed);
      for (const w of batch) w.resolve(done.has(w.item.id) ? ok('completed') : err(new LeaseLost(w.item.id)));
    } catch (e) {
      const failure = new DbError(undefined, e instanceof Error ? e.message : String(e), e);
      for (const w of batch) w.resolve(err(failure));
    }
  }

  async #writeFailures(batch: Waiting<FailItem, FailResult>[]): Promise<void> {
    try {
      const r = await this.#store.failMany(batch.map((w) => w.item));
      if (r.isErr()) {
        for (const w of batch) w.resolve(err(r.error));
        return;
      }
      for (const w of batch) {
        const outcome = r.value.get(w.item.job.id);
        w.resolve(outcome === undefined ? err(new LeaseLost(w.item.job.id)) : ok(outcome));
      }
    } catch (e) {
      const failure = new DbError(undefined, e instanceof Error ? e.message : String(e), e);
      for (const w of batch) w.resolve(err(failure));
    }
  }
}
