/**
 * Where a worker's reaper starts reading `jobs_leases` (the reap floor), and when it reads it from the
 * front instead (a sweep).
 *
 * Why: claiming a job adds its entry to `jobs_leases` (lease_expires_at, WHERE state = 'running'), and
 * completing it leaves that entry behind until vacuum removes it or a scan marks it dead, and neither
 * happens while a session holds the MVCC horizon back. Once such a job's lease time has passed, its
 * entry lies in the range every reaper reads (lease_expires_at < now()), from the front: a reaper that
 * finds nothing visited the heap for every job completed since the horizon was held, more than a lease
 * ago (measured under a held snapshot, jobs completed with leases that had lapsed: 7 shared buffers after
 * 200 jobs, 142 after 5,000, growing with them; from the floor, 7 and 2:
 * test/integration/queue-settle-plans.test.ts).
 *
 * A reaper pass that went through every expired lease it could see (its last statement returned fewer
 * rows than its batch) moves the floor up to its statement's now() minus `slackMs`: a lease that expired
 * before that and was not returned could only be one whose transaction committed after that pass
 * started with an expiry more than `slackMs` in the past (a claim or heartbeat that stayed open longer
 * than its lease plus slackMs), or one a settle in flight held locked (SKIP LOCKED) and then rolled back.
 * Those are the stragglers: a sweep, a pass from the front, runs at least every `sweepMs` and returns
 * them; the public `queue.reap()` always sweeps. A pass reads what lies past the floor: the entries of
 * the leases that lapsed since the previous pass (its interval plus slackMs), whatever the time the
 * horizon has been held.
 *
 * One floor per store (per queue instance in this process); the floor only rises, except at a sweep.
 *
 * @example
 * const floor = new ReapFloor();
 * const from = floor.start(); // epoch ms, or -Infinity: a sweep
 * // … reap from there; its last statement's now() (epoch ms) and whether it went through them all:
 * floor.record(from, atMs, true);
 */
export class ReapFloor {
  readonly #slackMs: number;
  readonly #sweepMs: number;
  readonly #clock: () => number;
  #floor = Number.NEGATIVE_INFINITY;
  #sweptAt = Number.NEGATIVE_INFINITY;

  /**
   * `slackMs`: how long past its lease a claim's or heartbeat's transaction may stay open and its lease
   * still be reaped by the next pass (default 1,000 ms). `sweepMs`: at most this long between two sweeps
   * (default 60,000 ms). `clock`: ms now (default `Date.now`).
   */
  constructor(o: { slackMs?: number; sweepMs?: number; clock?: () => number } = {}) {
    this.#slackMs = o.slackMs ?? 1_000;
    this.#sweepMs = o.sweepMs ?? 60_000;
    this.#clock = o.clock ?? Date.now;
  }

  /** Where the next pass starts: lease_expires_at as epoch ms, or -Infinity for a sweep. */
  start(): number {
    return this.#clock() - this.#sweptAt >= this.#sweepMs ? Number.NEGATIVE_INFINITY : this.#floor;
  }

  /**
   * After a pass that started at `from`: `atMs`, its last statement's now() (epoch ms); `complete`,
   * whether that statement returned fewer rows than its batch (every expired lease it could see past
   * `from` was returned).
   */
  record(from: number, atMs: number, complete: boolean): void {
    const sweep = from === Number.NEGATIVE_INFINITY;
    if (sweep) this.#sweptAt = this.#clock();
    if (!complete) {
      if (sweep) this.#floor = Number.NEGATIVE_INFINITY;
      return;
    }
    const candidate = atMs - this.#slackMs;
    this.#floor = sweep ? candidate : Math.max(this.#floor, candidate);
  }
}
