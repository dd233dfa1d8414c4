import { err, ok, type Result } from 'neverthrow';
import { type DatabaseFailure, DbError, LeaseLost } from '../../errors/errors.js';
import type { JobLease } from './job.js';
import type { FailItem, FailResult, Queue } from './queue.js';

/** Outcome of one settle: the job's fate, or why it could not be settled. */
export type SettleOutcome<V> = Result<V, LeaseLost | DatabaseFailure>;

interface Waiting<I, V> {
  readonly item: I;
  readonly resolve: (outcome: SettleOutcome<V>) => void;
}

/** Options of {@link SettleBatcher}. */
export interface SettleBatcherOptions {
  /** Collect settles for this many ms before writing (0: write on the next tick). */
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
  readonly #queue: Queue;
  readonly #options: SettleBatcherOptions;
  #completions: Waiting<JobLease, 'completed'>[] = [];
  #failures: Waiting<FailItem, FailResult>[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #inFlight = new Set<Promise<void>>();

  constructor(queue: Queue, options: SettleBatcherOptions) {
    this.#queue = queue;
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
    this.#timer ??= setTimeout(() => this.#write(), this.#options.delayMs);
  }

  #write(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const completions = this.#completions;
    const failures = this.#failures;
    this.#completions = [];
    this.#failures = [];
    if (completions.length > 0) this.#track(this.#writeCompletions(completions));
    if (failures.length > 0) this.#track(this.#writeFailures(failures));
  }

  #track(p: Promise<void>): void {
    this.#inFlight.add(p);
    void p.finally(() => this.#inFlight.delete(p));
  }

  async #writeCompletions(batch: Waiting<JobLease, 'completed'>[]): Promise<void> {
    try {
      const r = await this.#queue.completeMany(batch.map((w) => w.item));
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
      const r = await this.#queue.failMany(batch.map((w) => w.item));
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
