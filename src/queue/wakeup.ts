/**
 * A one-waiter wake-up signal that never loses a wake: `wake()` before `wait()` makes the next
 * `wait()` return at once. Used by the worker for NOTIFY, freed slots and stop.
 *
 * @example
 * const w = new Wakeup();
 * setTimeout(() => w.wake(), 10);
 * const woken = await w.wait(1000); // true (woken), false on timeout
 */
export class Wakeup {
  #pending = false;
  #resolve: ((woken: boolean) => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** Wakes the waiter, or the next one if nobody is waiting. */
  wake(): void {
    const resolve = this.#resolve;
    if (resolve === undefined) {
      this.#pending = true;
      return;
    }
    this.#settle(resolve, true);
  }

  /** Waits for a wake or `ms` milliseconds, whichever comes first. */
  wait(ms: number): Promise<boolean> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
      this.#resolve = resolve;
      this.#timer = setTimeout(() => this.#settle(resolve, false), Math.max(0, ms));
    });
  }

  #settle(resolve: (woken: boolean) => void, woken: boolean): void {
    if (this.#resolve !== resolve) return;
    this.#resolve = undefined;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    resolve(woken);
  }
}
