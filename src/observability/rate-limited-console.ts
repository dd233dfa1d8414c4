/** Without a logger, at most one console line per key in this many milliseconds. */
export const QUIET_MS = 60_000;

/**
 * THE console fallback of pg-txkit: what must reach a user who passed no logger and no hook goes to
 * `console.error`, at most one line per key (a kind of event: "claim failed", "idle connection failed")
 * per minute, so a database that is down for an hour writes sixty lines, not a million, and is never
 * silent. The state lives in the instance (one per pool, queue, worker or lock), never in the module.
 *
 * @example
 * const out = new RateLimitedConsole();
 * out.line('claim', 'pg-txkit queue worker: claim failed (connect ECONNREFUSED)');
 */
export class RateLimitedConsole {
  readonly #last = new Map<string, number>();
  readonly #quietMs: number;

  constructor(quietMs: number = QUIET_MS) {
    this.#quietMs = quietMs;
  }

  /** Writes `text` unless a line of the same `key` was written less than the quiet period ago. */
  line(key: string, text: string): boolean {
    const now = performance.now();
    const last = this.#last.get(key);
    if (last !== undefined && now - last < this.#quietMs) return false;
    this.#last.set(key, now);
    console.error(`${text} (further ones in the next minute are not shown)`);
    return true;
  }
}
