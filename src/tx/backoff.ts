/** Backoff parameters (milliseconds). */
export interface Backoff {
  /** Upper bound of the first retry's delay. */
  readonly baseMs: number;
  /** Upper bound of every delay. */
  readonly capMs: number;
}

/**
 * "Full jitter" exponential backoff: the delay before retry number `retry` (1-based) is a uniformly
 * random integer in `[0, min(capMs, baseMs * 2^(retry-1))]`. Spreading retries over the whole
 * interval stops a crowd of transactions that conflicted together from conflicting again together.
 * `random` is injectable (default `Math.random`) so tests can pin it.
 *
 * @example
 * fullJitterDelay(1, { baseMs: 10, capMs: 1000 }); // 0..10
 * fullJitterDelay(3, { baseMs: 10, capMs: 1000 }, () => 0.5); // 20
 */
export function fullJitterDelay(retry: number, backoff: Backoff, random: () => number = Math.random): number {
  const exponent = Math.max(0, Math.min(Math.floor(retry) - 1, 52));
  const ceiling = Math.max(0, Math.min(backoff.capMs, backoff.baseMs * 2 ** exponent));
  const r = random();
  const unit = Number.isFinite(r) ? Math.min(Math.max(r, 0), 1) : 0;
  return Math.min(ceiling, Math.floor(unit * (ceiling + 1)));
}
