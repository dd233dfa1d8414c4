import { err, type Result, type ResultAsync } from 'neverthrow';
import type { DatabaseFailure, InvalidOptions } from '../../errors/errors.js';
import { Wakeup } from '../wakeup.js';
import type { SchedulePassResult } from './schedule-pass.js';

/** What the loop needs: one pass of the queue's scheduler, and where its results and errors go. */
export interface ScheduleLoopOptions {
  readonly pass: (options: {
    declare: boolean;
    liveness: number;
  }) => ResultAsync<SchedulePassResult, InvalidOptions | DatabaseFailure>;
  /** Between passes, ms. */
  readonly intervalMs: number;
  /** A declaration not refreshed for this long is no longer live, ms; declarations are refreshed at a third of it. */
  readonly livenessMs: number;
  readonly onPass: (result: SchedulePassResult) => void;
  readonly onError: (error: unknown) => void;
}

/**
 * A worker's scheduler: a pass every `intervalMs` (fires due ticks), and every `livenessMs / 3` a
 * declaring pass (refreshes this process's definitions, reconciles, disables removed schedules). It
 * holds no state the database does not have: any replica's loop fires the next tick if this one stops.
 *
 * @example
 * const loop = new ScheduleLoop({ pass: (o) => queue.fireSchedules(o), intervalMs: 1000, livenessMs: 60_000, onPass() {}, onError() {} });
 * loop.start();
 * await loop.stop();
 */
export class ScheduleLoop {
  readonly #o: ScheduleLoopOptions;
  readonly #wake = new Wakeup();
  #stopping = false;
  #done: Promise<void> = Promise.resolve();

  constructor(options: ScheduleLoopOptions) {
    this.#o = options;
  }

  /** Starts the loop (the first pass declares at once). */
  start(): void {
    this.#done = this.#run().catch((e: unknown) => this.#o.onError(e));
  }

  /** Stops after the pass in flight (if any) has committed or rolled back. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#wake.wake();
    await this.#done;
  }

  async #run(): Promise<void> {
    let lastDeclare = Number.NEGATIVE_INFINITY;
    let failures = 0;
    while (!this.#stopping) {
      const declare = Date.now() - lastDeclare >= this.#o.livenessMs / 3;
      // A defect in a pass (it rejects) is reported like a failure: the loop goes on, the next pass retries.
      let r: Result<SchedulePassResult, unknown>;
      try {
        r = await this.#o.pass({ declare, liveness: this.#o.livenessMs });
      } catch (defect) {
        r = err(defect);
      }
      if (r.isOk()) {
        failures = 0;
        if (declare) lastDeclare = Date.now();
        this.#o.onPass(r.value);
      } else {
        failures++;
        this.#o.onError(r.error);
      }
      // A failing database: back off (up to 5 s or the interval), wake at once on stop.
      const cap = Math.max(this.#o.intervalMs, 5000);
      const wait = failures === 0 ? this.#o.intervalMs : Math.min(this.#o.intervalMs * 2 ** failures, cap);
      await this.#wake.wait(wait);
    }
  }
}
