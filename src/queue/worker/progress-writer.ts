import { err, type Result } from 'neverthrow';
import { type DatabaseFailure, DbError, type InvalidOptions, LeaseLost } from '../../errors/errors.js';
import type { JobLease } from '../job.js';

/** What a progress write can fail with. */
type SettleError = LeaseLost | InvalidOptions | DatabaseFailure;

/** What a {@link ProgressWriter} writes with: one fenced progress statement for one job. */
export type WriteProgress = (
  job: JobLease,
  json: string,
) => PromiseLike<Result<void, LeaseLost | DatabaseFailure>>;

/** Resolves one `report` call with the outcome of the write that carried its value (or a later one). */
type Waiter = (outcome: Result<void, SettleError>) => void;

/**
 * Coalesces one running job's progress reports: the last value wins, written at most once per
 * `intervalMs` (the first report at once, later ones on a timer), never two writes at a time, and once
 * more at the end (`flush`). A handler calling `ctx.progress` in a tight loop sends a statement per
 * interval, not per call. Each report resolves with the outcome of the write that carried its value or
 * a newer one. After a `LeaseLost` (or `close`) nothing more is sent: reports resolve `LeaseLost` at once.
 *
 * @example
 * const writer = new ProgressWriter(job, 1000, (j, json) => queue.writeProgress(j, json), () => abort());
 * await writer.report('{"done":1}');
 * await writer.flush();
 */
export class ProgressWriter {
  readonly #job: JobLease;
  readonly #intervalMs: number;
  readonly #write: WriteProgress;
  readonly #onLost: () => void;
  #pending: { json: string; waiters: Waiter[] } | undefined;
  #inFlight: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #lastWriteAt = Number.NEGATIVE_INFINITY;
  #closed = false;

  constructor(job: JobLease, intervalMs: number, write: WriteProgress, onLost: () => void) {
    this.#job = job;
    this.#intervalMs = intervalMs;
    this.#write = write;
    this.#onLost = onLost;
  }

  /** Queues `json` as the job's progress (replacing a value not yet written). */
  report(json: string): Promise<Result<void, SettleError>> {
    if (this.#closed) return Promise.resolve(err(new LeaseLost(this.#job.id)));
    return new Promise((resolve) => {
      if (this.#pending === undefined) this.#pending = { json, waiters: [resolve] };
      else {
        this.#pending.json = json;
        this.#pending.waiters.push(resolve);
      }
      this.#schedule();
    });
  }

  /** Writes the value still waiting now (the run is over) and waits for every write in flight. */
  async flush(): Promise<void> {
    while (this.#inFlight !== undefined || (this.#pending !== undefined && !this.#closed)) {
      // A write in flight may have set the interval's timer for the next one: it goes now instead.
      clearTimeout(this.#timer);
      this.#timer = undefined;
      if (this.#inFlight === undefined) this.#start();
      await this.#inFlight;
    }
  }

  /** Drops the value waiting (the job is no longer ours) and refuses later reports. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#resolvePending(err(new LeaseLost(this.#job.id)));
  }

  #resolvePending(outcome: Result<void, SettleError>): void {
    const waiters = this.#pending?.waiters ?? [];
    this.#pending = undefined;
    for (const w of waiters) w(outcome);
  }

  #schedule(): void {
    if (this.#inFlight !== undefined || this.#timer !== undefined || this.#pending === undefined) return;
    const wait = this.#lastWriteAt + this.#intervalMs - Date.now();
    if (wait <= 0) {
      this.#start();
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#start();
    }, wait);
    this.#timer.unref?.();
  }

  #start(): void {
    const batch = this.#pending;
    if (batch === undefined || this.#closed) return;
    this.#pending = undefined;
    this.#lastWriteAt = Date.now();
    this.#inFlight = (async () => {
      let outcome: Result<void, SettleError>;
      try {
        outcome = await this.#write(this.#job, batch.json);
      } catch (e) {
        // The write is a ResultAsync and does not reject; if it ever did, its reports must still settle.
        outcome = err(new DbError(undefined, e instanceof Error ? e.message : String(e), e));
      }
      for (const w of batch.waiters) w(outcome);
      this.#inFlight = undefined;
      if (outcome.isErr() && outcome.error.kind === 'LeaseLost') {
        this.close();
        this.#onLost();
        return;
      }
      this.#schedule();
    })();
  }
}
