/**
 * A minimal FIFO async mutex. The transaction manager keeps one per transaction scope so that
 * concurrent `nested` scopes on the same transaction run their SAVEPOINT … RELEASE one after the
 * other (two interleaved savepoints on one connection would roll back each other's work).
 *
 * @example
 * const m = new Mutex();
 * const value = await m.run(async () => 42);
 */
export class Mutex {
  #tail: Promise<void> = Promise.resolve();

  /** Runs `fn` once every earlier `run` has settled; resolves or rejects with `fn`'s outcome. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(fn);
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}
