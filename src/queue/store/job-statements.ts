import { err, ok, okAsync, type Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import type { DatabaseFailure } from '../../errors/errors.js';
import { LeaseLost } from '../../errors/errors.js';
import type { Db, Queryable } from '../../tx/types.js';
import {
  type ClaimedLease,
  type ClaimedRow,
  type JobLease,
  jobsFromClaim,
  type LimitedClaimedRow,
} from '../job.js';
import { ClaimFloor, type FloorKey } from './claim-floor.js';
import {
  type ClaimedBatch,
  type ClaimStore,
  type CompleteAndTakeNextResult,
  type CompleteManyResult,
  type FailItem,
  type FailResult,
  type LeaseStore,
  type ProgressStore,
  REAP_BATCHES,
  type ReapResult,
  type ReapStore,
  type SettleStore,
} from './job-store.js';
import type { QueueStatements } from './queue-sql.js';
import { ReapFloor } from './reap-floor.js';
import { runStatement, runTuples } from './run-statement.js';
import { leaseArrays, splitLeases } from './split-leases.js';

/** ',' */
const COMMA = 44;
/**
 * The outcome of a worker's completion of `jobs`, from the statement's completed ids as one array literal
 * of digits ('{1,2,3}'): when it holds as many ids as were sent (the usual case), all of them were
 * completed, and it need not be parsed.
 */
function completedOf(jobs: readonly ClaimedLease[], ids = '{}'): CompleteManyResult {
  let count = ids === '{}' ? 0 : 1;
  for (let i = 0; i < ids.length; i++) if (ids.charCodeAt(i) === COMMA) count++;
  if (count === jobs.length) return { completed: jobs.map((j) => j.id), lost: [], invalid: [] };
  return { ...partitionCompleted(jobs, new Set(ids.slice(1, -1).split(','))), invalid: [] };
}

/** Splits a completion's jobs into those completed (ids in `done`) and those whose lease was lost. */
function partitionCompleted(jobs: readonly JobLease[], done: ReadonlySet<string>) {
  const completed: string[] = [];
  const lost: string[] = [];
  for (const j of jobs) (done.has(j.id) ? completed : lost).push(j.id);
  return { completed, lost };
}

/**
 * What a measured claim's row says for its floor from its column `at` on (walked, claimed, at_ms,
 * min_at_ms, min_id: claimMeasured and claimLimitedMeasured in queue-sql.ts).
 */
function measuredOutcome(row: Readonly<(string | null)[]>, at: number) {
  const minAt = row[at + 3];
  const minId = row[at + 4];
  const smallest: FloorKey | undefined =
    minAt === null || minAt === undefined || minId === null || minId === undefined
      ? undefined
      : [Number(minAt), minId];
  return { walked: Number(row[at]), claimed: Number(row[at + 1]), atMs: Number(row[at + 2]), smallest };
}

/** What the plain claim's row says for its floor. */
function floorOutcome(row: Readonly<FloorClaimedRow>) {
  return { ...measuredOutcome(row, 4), behind: row[9] === 't' };
}

/** The jobs and the wait of a limited claim's row. */
function limitedBatch(row: Readonly<LimitedClaimedRow> | undefined): ClaimedBatch {
  const wait = row?.[4];
  return { jobs: jobsFromClaim(row), waitMs: wait === null || wait === undefined ? undefined : Number(wait) };
}

/**
 * The live entries of jobs_claimable a limited claim of `asked` jobs that took `claimed` may read beyond
 * what the floor's threshold allows with nothing left behind: when it took fewer than half (pass 1 ran),
 * the search for where its head window ended and pass 1's window, `budget` = 2 × asked + 32 entries each
 * (claim_jobs_limited, migration 0012); its head window alone is within the threshold.
 */
const limitedWindows = (asked: number, claimed: number) => (claimed * 2 < asked ? 2 * (2 * asked + 32) : 0);

/** What the limited claim's row says for its floor: as the plain claim's, with the key it may not pass. */
function limitedFloorOutcome(row: Readonly<LimitedFloorRow>, asked: number) {
  const measured = measuredOutcome(row, 5);
  return {
    ...measured,
    behind: false,
    bound: [Number(row[10]), row[11] ?? '0'] as const,
    windows: limitedWindows(asked, measured.claimed),
  };
}

/** Whether any of `jobs` has a group (the statement then needs the steps that give group slots back). */
function anyGrouped(jobs: readonly ClaimedLease[]): boolean {
  for (const job of jobs) if (job.group !== null) return true;
  return false;
}

/** What {@link JobStatements} runs on. */
export interface JobStatementsConfig {
  /** Where the statements go (a worker's claims and settles are autocommit statements on it). */
  readonly pool: pg.Pool;
  /** The queue schema's statements. */
  readonly sql: QueueStatements;
  /** The declared group and task limits (jsonb for the limited claim), or undefined: the plain claim. */
  readonly limits: string | undefined;
  /** Whether completions take over the group slots they free (limits declared, concurrency only). */
  readonly takesOver: boolean;
  /** Where the claim (plain or limited) starts (default: a new {@link ClaimFloor}; tests give one with their clock). */
  readonly floor?: ClaimFloor | undefined;
  /** Where the worker's reaper starts (default: a new {@link ReapFloor}; tests give one with their clock). */
  readonly reapFloor?: ReapFloor | undefined;
}

/** The plain claim's row: the jobs, then what its floor needs (see queue-sql.ts, `claim`). */
type FloorClaimedRow = [
  ...ClaimedRow,
  walked: string,
  claimed: string,
  atMs: string,
  minAtMs: string | null,
  minId: string | null,
  behind: string,
];

/** The limited claim's row: the jobs and the wait, then what its floor needs (see queue-sql.ts). */
type LimitedFloorRow = [
  ...LimitedClaimedRow,
  walked: string,
  claimed: string,
  atMs: string,
  minAtMs: string | null,
  minId: string | null,
  boundMs: string,
  boundId: string | null,
];

/**
 * The statements that move a job through its lease: claim, complete, fail, extend, release, reap and
 * progress, on input that is already valid (the public `Queue` parses the user's options first; a
 * worker's are parsed when it starts). A queue owns one; its public methods delegate to it, and its
 * workers get it as the narrow stores ({@link ClaimStore}, {@link SettleStore}, {@link LeaseStore},
 * {@link ReapStore}, {@link ProgressStore}) each of their parts takes, so none of them depends on the
 * public queue.
 *
 * @example
 * const jobs = new JobStatements({ pool, sql: queueStatements('jobs', options), limits: undefined, takesOver: false });
 * const batch = await jobs.claimBatch({ batch: 10, lease: 30_000, tasks: ['email'] });
 */
export class JobStatements implements ClaimStore, SettleStore, LeaseStore, ReapStore, ProgressStore {
  readonly #pool: pg.Pool;
  readonly #sql: QueueStatements;
  readonly #limits: string | undefined;
  readonly #takesOver: boolean;
  readonly #floor: ClaimFloor;
  readonly #reapFloor: ReapFloor;

  /** Holds the statements of one queue schema; sends nothing. */
  constructor(config: JobStatementsConfig) {
    this.#pool = config.pool;
    this.#sql = config.sql;
    this.#limits = config.limits;
    this.#takesOver = config.takesOver;
    this.#floor = config.floor ?? new ClaimFloor();
    this.#reapFloor = config.reapFloor ?? new ReapFloor();
  }

  /** Claims up to `batch` runnable jobs of `tasks` in one statement, each leased for `lease` ms. */
  claimBatch(o: {
    batch: number;
    lease: number;
    tasks: readonly string[];
  }): ResultAsync<ClaimedBatch, DatabaseFailure> {
    const params = [o.batch, o.lease, o.tasks];
    if (this.#limits === undefined) {
      const from = this.#floor.start(o.tasks);
      if (from === undefined)
        return runTuples<ClaimedRow>(this.#pool, this.#sql.claim, params).map((res) => ({
          jobs: jobsFromClaim(res.rows[0]),
          waitMs: undefined,
        }));
      return runTuples<FloorClaimedRow>(this.#pool, this.#sql.claimMeasured, [...params, ...from]).map(
        (res) => {
          const row = res.rows[0];
          if (row === undefined) return { jobs: [], waitMs: undefined };
          this.#floor.record(o.tasks, o.batch, from, floorOutcome(row));
          return { jobs: jobsFromClaim([row[0], row[1], row[2], row[3]]), waitMs: undefined };
        },
      );
    }
    const limited = [...params, this.#limits];
    const from = this.#floor.start(o.tasks);
    if (from === undefined)
      return runTuples<LimitedClaimedRow>(this.#pool, this.#sql.claimLimited, limited).map((res) =>
        limitedBatch(res.rows[0]),
      );
    return runTuples<LimitedFloorRow>(this.#pool, this.#sql.claimLimitedMeasured, [...limited, ...from]).map(
      (res) => {
        const row = res.rows[0];
        if (row === undefined) return { jobs: [], waitMs: undefined };
        this.#floor.record(o.tasks, o.batch, from, limitedFloorOutcome(row, o.batch));
        return limitedBatch([row[0], row[1], row[2], row[3], row[4]]);
      },
    );
  }

  /** Completes many jobs in one fenced statement on `db`; malformed leases are reported, not sent. */
  completeMany(
    jobs: readonly JobLease[],
    db: Db = this.#pool,
  ): ResultAsync<CompleteManyResult, DatabaseFailure> {
    const { valid, invalid } = splitLeases(jobs, (j) => j);
    if (valid.length === 0) return okAsync({ completed: [], lost: [], invalid });
    return runStatement<{ ids: string[] }>(db, this.#sql.complete, leaseArrays(valid)).map((res) => ({
      ...partitionCompleted(valid, new Set(res.rows[0]?.ids)),
      invalid,
    }));
  }

  /** As completeMany, for jobs this store's own claim returned (their leases are not checked again). */
  completeClaimed(jobs: readonly ClaimedLease[]): ResultAsync<CompleteManyResult, DatabaseFailure> {
    if (jobs.length === 0) return okAsync({ completed: [], lost: [], invalid: [] });
    const text = anyGrouped(jobs) ? this.#sql.complete : this.#sql.completeUngrouped;
    return runTuples<[string]>(this.#pool, text, leaseArrays(jobs)).map((res) =>
      completedOf(jobs, res.rows[0]?.[0]),
    );
  }

  /**
   * As completeClaimed, and on a queue whose limits are concurrency only (no `rate`, no `taskRates`) it
   * takes over the group slots it frees, in the same call: for each group that had k of these jobs, the
   * group's next k ready jobs of `tasks` (in claim order within the group) are leased for `lease` ms, as
   * a claim leases them, and come back in `next` to be run. The group's count of running jobs does not
   * change, so its row is not written, and no claim has to find the group again: this is how a worker
   * keeps serial groups moving at close to the unlimited queue's speed. One autocommit call of the
   * schema's `complete_take_next` function: the jobs are completed first, then the next ones are looked
   * for under a new snapshot, so a job another completion has just taken over is not tried (trying it
   * would hold that job's row lock until this call ends, and make its worker's completion of it wait).
   * A job is taken over only when no ready job of `tasks` has a better priority, and only while the
   * group's count is within its declared concurrency (after a limit was lowered, slots are given back
   * until it is). `max`: at most that many jobs taken over in all (a worker passes the room its local
   * queue has; the other slots go back). Without limits, with a rate limit declared, for jobs without a
   * group, or with `max: 0`, `next` is empty and this is completeClaimed.
   */
  completeAndTakeNext(
    jobs: readonly ClaimedLease[],
    o: { lease: number; tasks: readonly string[]; max: number },
  ): ResultAsync<CompleteAndTakeNextResult, DatabaseFailure> {
    if (!this.#takesOver || !anyGrouped(jobs) || o.max === 0)
      return this.completeClaimed(jobs).map((r) => ({ ...r, next: [] }));
    const values = [...leaseArrays(jobs), o.lease, o.tasks, this.#limits, o.max];
    return runTuples<[string, string, ...ClaimedRow]>(this.#pool, this.#sql.completeTakeNext, values).map(
      (res) => {
        const row = res.rows[0];
        const next = row === undefined ? [] : jobsFromClaim([row[2], row[3], row[4], row[5]]);
        return { ...completedOf(jobs, row?.[0]), next };
      },
    );
  }

  /** Writes many failures in one fenced statement; the map holds the jobs that were still ours. */
  failMany(all: readonly FailItem[]): ResultAsync<Map<string, FailResult>, DatabaseFailure> {
    const items = splitLeases(all, (i) => i.job).valid;
    if (items.length === 0) return okAsync(new Map());
    return runStatement<{ id: string; state: 'pending' | 'dead'; run_at: Date }>(this.#pool, this.#sql.fail, [
      items.map((i) => i.job.id),
      items.map((i) => i.job.leaseToken),
      // NUL (U+0000) cannot be stored in text: an error message holding one (binary protocols…) made
      // the whole fail statement fail with 22021, so the job stayed running until its lease expired
      // (found by test/property/fuzz-queue). Replaced by U+FFFD.
      items.map((i) => i.error.slice(0, 10_000).replaceAll('\u0000', '\ufffd')),
      items.map((i) => i.retryInMs ?? null),
      items.map((i) => i.final === true),
    ]).map((res) => new Map(res.rows.map((r) => [String(r.id), { state: r.state, runAt: r.run_at }])));
  }

  /** The fenced completion of `job` on `db` (a transaction); driver errors propagate unchanged. */
  async completeWithin(db: Db, job: JobLease): Promise<boolean> {
    const res = await (db as Queryable).query<{ ids: string[] }>(this.#sql.complete, [
      [job.id],
      [job.leaseToken],
    ]);
    return (res.rows[0]?.ids.length ?? 0) > 0;
  }

  /** Extends many leases to now + `lease` ms in one fenced statement (heartbeat). */
  extendMany(jobs: readonly JobLease[], lease: number): ResultAsync<Map<string, Date>, DatabaseFailure> {
    const valid = splitLeases(jobs, (j) => j).valid;
    if (valid.length === 0) return okAsync(new Map());
    return runStatement<{ id: string; lease_expires_at: Date }>(this.#pool, this.#sql.extend, [
      valid.map((j) => j.id),
      valid.map((j) => j.leaseToken),
      lease,
    ]).map((res) => new Map(res.rows.map((r) => [String(r.id), r.lease_expires_at])));
  }

  /** Gives running jobs back without charging the attempt, then wakes the workers. */
  release(all: readonly JobLease[]): ResultAsync<string[], DatabaseFailure> {
    const jobs = splitLeases(all, (j) => j).valid;
    if (jobs.length === 0) return okAsync([]);
    return runStatement<{ id: string }>(this.#pool, this.#sql.release, [
      jobs.map((j) => j.id),
      jobs.map((j) => j.leaseToken),
    ])
      .map((res) => res.rows.map((r) => String(r.id)))
      .andThen((ids) => runStatement(this.#pool, this.#sql.notify, []).map(() => ids));
  }

  /**
   * Returns expired leases to pending (or dead), `batch` rows a statement, at most `maxBatches` of them.
   * `from`: 'floor' (the worker's reaper) starts at this store's reap floor, past the entries of leases
   * it already went through (a sweep from the front at least once a minute; see {@link ReapFloor});
   * 'front' reads every expired lease from the front (`queue.reap()`).
   */
  reap(
    o: { readonly batch: number; readonly maxBatches: number } = REAP_BATCHES,
    from: 'floor' | 'front' = 'floor',
  ): ResultAsync<ReapResult, DatabaseFailure> {
    const start = from === 'floor' ? this.#reapFloor.start() : Number.NEGATIVE_INFINITY;
    const loop = async (): Promise<Result<ReapResult, DatabaseFailure>> => {
      let requeued = 0;
      let dead = 0;
      let atMs = Number.NEGATIVE_INFINITY;
      let complete = false;
      for (let i = 0; i < o.maxBatches && !complete; i++) {
        const r = await runStatement<{ id: string | null; state: string; at_ms: string }>(
          this.#pool,
          this.#sql.reap,
          [o.batch, start],
        );
        if (r.isErr()) return err(r.error);
        let rows = 0;
        for (const row of r.value.rows) {
          atMs = Number(row.at_ms);
          if (row.id === null) continue;
          rows++;
          row.state === 'dead' ? dead++ : requeued++;
        }
        complete = rows < o.batch;
      }
      this.#reapFloor.record(start, atMs, complete);
      return ok({ requeued, dead });
    };
    return new ResultAsync(loop());
  }

  /** Stores a running job's progress (JSON text from `progressJson`), fenced by the lease token. */
  writeProgress(job: JobLease, json: string): ResultAsync<void, LeaseLost | DatabaseFailure> {
    return runStatement(this.#pool, this.#sql.progress, [job.id, job.leaseToken, json]).andThen((res) =>
      res.rowCount === 0 ? err(new LeaseLost(job.id)) : ok(undefined),
    );
  }
}
