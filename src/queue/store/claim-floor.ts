/**
 * Where a worker's claim (the plain claim, and the limited claim of a queue with groups or rates) starts
 * reading `jobs_claimable` (the claim floor), and when it reads it from the front instead (a sweep).
 *
 * Why: claiming a job leaves its old entry in `jobs_claimable` until vacuum removes it or a scan marks
 * it dead, and neither happens while a session holds the MVCC horizon back (a REPEATABLE READ
 * transaction left open, a session idle in transaction, a replication slot, a long pg_dump). A claim
 * read from the front then walks, and visits the heap for, every job claimed since: its cost grows with
 * the jobs claimed (under a held snapshot, a claim that finds nothing read 5 shared buffers after 200
 * jobs claimed, 146 after 5,000; from the floor 5 and 7: test/integration/queue-claim-floor.test.ts). A
 * claim that starts at a floor, a key (run_at, id) below which every ready pending job it could claim has
 * been claimed already, reads only what lies past it.
 *
 * The floor moves up after each claim, to the smaller of:
 * - `now() - slackMs` of the claim (when it took fewer jobs than it asked for, every visible ready job
 *   at or past the floor was claimed; a job committed later has run_at = its transaction's now(), so one
 *   whose transaction started more than slackMs before the claim is the only kind it can miss), and
 * - the smallest key (run_at, id) the claim took, when no ready job of a later priority lies between the
 *   old floor and that key (the claim reads the priorities in order and stops in the last one it took
 *   from; `claim_floor_behind` checks the later ones, one index probe when a single priority is in use).
 * The limited claim (claim_jobs_limited, migration 0012) leaves jobs its groups' or tasks' limits hold back:
 * it reports the smallest key of a job its head window left (or the window's last key when the window
 * was full and no ready job of a later priority lies below it; otherwise the floor stays), its `bound`,
 * and the floor rises to no more than that (nor above the two limits above).
 * It never moves down, except at a sweep: a claim from the front (see below for how often), which takes
 * what fell below the floor (the stragglers: a job whose enqueuing transaction stayed open more than
 * slackMs, a job enqueued with a run_at in the past, a job another statement held locked while a claim
 * passed it) and computes the floor afresh.
 *
 * The floor is used only while the horizon is held: after a sweep that read more index entries than it
 * could have taken (more than `4 × batch + 1,024` beyond the jobs claimed, counted by the server:
 * pg_stat_get_xact_tuples_returned of the index), the claims start at the floor until the next sweep;
 * after a cheap sweep, the claims are the plain claim from the front, in claim order exactly as before
 * (and without the floor's extra steps, which cost about half a plain claim's server CPU), until the
 * next sweep, a second later. So a straggler waits
 * longer than claim order only while the queue's index is full of entries nothing can remove: at most
 * `sweepMs`, or one second per 10,000 entries the last sweep read if that is longer (see
 * SWEEP_ENTRIES_PER_MS).
 *
 * One floor per set of tasks (the claim's `tasks`), kept in this process: each worker process has its
 * own, and each is safe on its own (the floor only ever rises to a key that is safe for every claimer).
 *
 * @example
 * const floor = new ClaimFloor();
 * const from = floor.start(['email']); // [run_at as epoch ms, id]: the claim's $4 and $5
 * // … claim up to 100 jobs from there, then, with what the claim statement reported:
 * floor.record(['email'], 100, from, { walked, claimed, atMs, smallest, behind });
 */
export class ClaimFloor {
  readonly #slackMs: number;
  readonly #sweepMs: number;
  readonly #clock: () => number;
  readonly #floors = new Map<string, FloorState>();

  /**
   * `slackMs`: how long an enqueuing transaction may stay open after its now() and its job still be
   * claimed in order (default 200 ms). `sweepMs`: at most this long between two sweeps while the floor
   * is in use (default 1,000 ms). `clock`: ms now (default `Date.now`).
   */
  constructor(o: { slackMs?: number; sweepMs?: number; clock?: () => number } = {}) {
    this.#slackMs = o.slackMs ?? 200;
    this.#sweepMs = o.sweepMs ?? 1_000;
    this.#clock = o.clock ?? Date.now;
  }

  /**
   * Where the next claim of `tasks` starts: (epoch ms of run_at, id), or (-Infinity, 0) for a sweep (the
   * claim from the front, measured: its outcome goes to `record`); undefined: the plain claim from the
   * front, not measured (the floor is not in use and a sweep ran less than `sweepMs` ago).
   */
  start(tasks: readonly string[]): FloorKey | undefined {
    const f = this.#floors.get(keyOf(tasks));
    if (f === undefined || this.#clock() - f.sweptAt >= f.sweepEvery) return SWEEP;
    return f.inUse ? f.key : undefined;
  }

  /** Moves the floor of `tasks` after a claim of `asked` jobs that started at `from` returned `result`. */
  record(tasks: readonly string[], asked: number, from: FloorKey, result: ClaimOutcome): void {
    const key = keyOf(tasks);
    let f = this.#floors.get(key);
    if (f === undefined) {
      f = { key: SWEEP, inUse: false, sweptAt: this.#clock(), sweepEvery: this.#sweepMs };
      this.#floors.set(key, f);
    }
    const candidate = nextFloor(result, asked, this.#slackMs);
    if (from[0] === SWEEP[0]) {
      f.key = candidate;
      f.sweptAt = this.#clock();
      f.inUse = result.walked - result.claimed - (result.windows ?? 0) > 4 * asked + 1_024;
      f.sweepEvery = Math.max(this.#sweepMs, result.walked / SWEEP_ENTRIES_PER_MS);
      return;
    }
    if (compareKeys(candidate, f.key) > 0) f.key = candidate;
  }
}

/** A claim floor: (epoch ms of run_at, id); a job is read when (run_at, id) >= it. */
export type FloorKey = readonly [atMs: number, id: string];

/** The claim from the front. */
const SWEEP: FloorKey = [Number.NEGATIVE_INFINITY, '0'];

/** What a claim statement reports for its floor (see queue-sql.ts, `claim`). */
export interface ClaimOutcome {
  /** Index entries of jobs_claimable the claim read (pg_stat_get_xact_tuples_returned). */
  readonly walked: number;
  /** Jobs it claimed. */
  readonly claimed: number;
  /** The claim's now(), epoch ms (floor). */
  readonly atMs: number;
  /** The smallest key (run_at, id) it claimed (run_at as epoch ms, floor), or undefined when none. */
  readonly smallest: FloorKey | undefined;
  /** Whether a ready job of a later priority than the last one it claimed lies below `smallest`. */
  readonly behind: boolean;
  /**
   * The limited claim only: the key the floor may not pass, whatever it claimed (the smallest key of a
   * job it read and left; run_at +Infinity: none, -Infinity: the floor stays where it is).
   */
  readonly bound?: FloorKey | undefined;
  /**
   * The limited claim only: the live entries it may read beyond the jobs it takes with nothing left
   * behind in the index (its windows; see limitedWindows in job-statements.ts), not counted as left
   * behind when a sweep decides whether the floor is in use.
   */
  readonly windows?: number | undefined;
}

interface FloorState {
  key: FloorKey;
  inUse: boolean;
  sweptAt: number;
  /** Ms between two sweeps: sweepMs, or longer when the last sweep read many entries (see below). */
  sweepEvery: number;
}

/**
 * How many index entries per ms of the clock the sweeps may read at most: a sweep that read W entries
 * is followed by the next one after W / 10 ms at the earliest (and sweepMs at least). A sweep reads every
 * entry left behind since the horizon was held, so at a fixed interval its cost per second would grow
 * with the time the horizon has been held (measured at 1,000 jobs/s: +1 index entry read per job for
 * every second held). With this budget the sweeps read at most 10,000 entries a second, whatever that
 * time; the price is the stragglers' wait, one second per 10,000 entries left behind (a minute held at
 * 2,000 jobs/s: 12 s).
 */
const SWEEP_ENTRIES_PER_MS = 10;

/** The floor a claim's outcome allows (see the class's doc): never above its now() - slack. */
function nextFloor(r: ClaimOutcome, asked: number, slackMs: number): FloorKey {
  const bySlack: FloorKey = [r.atMs - slackMs, '0'];
  let bound = r.bound ?? NO_BOUND;
  if (r.claimed >= asked) bound = smaller(bound, r.behind || r.smallest === undefined ? SWEEP : r.smallest);
  return smaller(bound, bySlack);
}

/** No bound but the slack's. */
const NO_BOUND: FloorKey = [Number.POSITIVE_INFINITY, '0'];

/** The smaller of two floor keys. */
function smaller(a: FloorKey, b: FloorKey): FloorKey {
  return compareKeys(a, b) < 0 ? a : b;
}

/** Orders two floor keys as PostgreSQL orders (run_at, id). */
function compareKeys(a: FloorKey, b: FloorKey): number {
  if (a[0] !== b[0]) return a[0] < b[0] ? -1 : 1;
  const d = BigInt(a[1]) - BigInt(b[1]);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}

/** The floor's key for a set of tasks (order does not matter to the claim). */
function keyOf(tasks: readonly string[]): string {
  return [...tasks].sort().join('\u0000');
}
