import type * as FastCheck from 'fast-check';
import pg from 'pg';
import { z } from 'zod/v4';
import { parseOptions } from '../errors/parse-options.js';
import { interleavings } from './arbitraries.js';
import { contextSwitches, interleavingsByFewestSwitches } from './context-switches.js';
import { formatOutcomes } from './format-outcomes.js';
import { type Interleaved, interleavingCount } from './interleavings.js';
import { Schedule, type ScheduleOptions, type StepOutcome } from './schedule.js';

/** A step of a session in {@link explore}: SQL, or SQL with parameters. */
export type ExploreStep = string | readonly [sql: string, params: readonly unknown[]];

/** What an invariant may query: the control connection of {@link explore}. */
export interface ExploreDb {
  /** Runs one statement on the control connection (pg's `client.query`). */
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

/**
 * The invariant checked after each interleaving: `true` when it holds; `false` or a sentence saying
 * what broke otherwise. It gets the control connection and the outcomes of the steps.
 */
export type ExploreInvariant = (
  db: ExploreDb,
  outcomes: readonly StepOutcome[],
) => boolean | string | Promise<boolean | string>;

/**
 * The fast-check module, as {@link explore} takes it when it samples (`import fc from 'fast-check'`).
 * Described by the functions it must have rather than by fast-check's own types, so that
 * 'pg-txkit/testing' type-checks in a project without fast-check (an optional peer).
 *
 * @example
 * import fc from 'fast-check';
 * const sampler: ExploreFastCheck = fc;
 */
export interface ExploreFastCheck {
  /** `fc.bigInt`: draws an interleaving's rank. */
  readonly bigInt: (...args: never[]) => unknown;
  /** `fc.constant`: the one interleaving of a single session. */
  readonly constant: (...args: never[]) => unknown;
  /** `fc.constantFrom`. */
  readonly constantFrom: (...args: never[]) => unknown;
  /** `fc.asyncProperty`: the invariant over sampled interleavings. */
  readonly asyncProperty: (...args: never[]) => unknown;
  /** `fc.check`: runs the property, shrinking a failure to a minimal interleaving. */
  readonly check: (...args: never[]) => unknown;
}

/** The parts of fast-check that sampling calls (the real module, behind {@link ExploreFastCheck}). */
type FastCheckSampler = Pick<
  typeof FastCheck,
  'bigInt' | 'constant' | 'constantFrom' | 'asyncProperty' | 'check'
>;

const exploreOptionsSchema = z
  .object({
    /** Connection string of the database to explore on (its tables are the caller's). */
    url: z.string().min(1),
    /** SQL run on a control connection before every interleaving: it must build a fresh state. */
    setup: z.string(),
    /** SQL run on the control connection after every interleaving. */
    teardown: z.string().optional(),
    /** Each session's steps, in that session's order (2 to 8 sessions). */
    sessions: z
      .record(
        z.string(),
        z
          .array(z.union([z.string(), z.tuple([z.string(), z.array(z.unknown()).readonly()]).readonly()]))
          .min(1),
      )
      .refine((s) => Object.keys(s).length >= 1 && Object.keys(s).length <= 8, 'one to eight sessions'),
    /** SQL run once on every session when it is opened (e.g. `SET deadlock_timeout = '20ms'`). */
    sessionSetup: z.string().optional(),
    invariant: z.custom<ExploreInvariant>((v) => typeof v === 'function', 'a function'),
    /** Every interleaving is run when there are at most this many. Default 500. */
    exhaustiveLimit: z.number().int().min(0).max(100_000).default(500),
    /** fast-check (`import fc from 'fast-check'`), needed only when there are more interleavings. */
    fc: z
      .custom<ExploreFastCheck>((v) => typeof v === 'object' && v !== null, 'the fast-check module')
      .optional(),
    /** Sampled interleavings when sampling. Default 100. */
    numRuns: z.number().int().positive().max(100_000).default(100),
    /** fast-check seed, to replay a sampled run. */
    seed: z.number().int().optional(),
    /**
     * When sampling found a failure: at most this many more interleavings are run, fewest context
     * switches first, to find a failing one with fewer switches than fast-check's. Default 200.
     */
    minimizeRuns: z.number().int().min(0).max(100_000).default(200),
    /** Options of the Schedule (timeouts, poll interval). `whenSessionBlocked` defaults to `'defer'`. */
    schedule: z
      .custom<Omit<ScheduleOptions, 'sessions'>>((v) => typeof v === 'object' && v !== null)
      .optional(),
  })
  .strict();

/** Options of {@link explore}. */
export type ExploreOptions = z.input<typeof exploreOptionsSchema>;

/** The first interleaving found that breaks the invariant. */
export interface ExploreCounterexample {
  /** The steps in the order they were given to the Schedule. */
  readonly interleaving: readonly Interleaved<string, ExploreStep>[];
  /** What each step did (empty when the schedule itself failed). */
  readonly outcomes: readonly StepOutcome[];
  /** Why: the invariant's sentence, or the Schedule's error. */
  readonly reason: string;
  /** The outcomes as a readable table (see {@link formatOutcomes}), with the reason last. */
  readonly table: string;
  /** Context switches of the interleaving: adjacent steps of different sessions. */
  readonly switches: number;
  /**
   * Every interleaving with fewer switches was run and passed: no failing order is simpler. Always
   * true when exploring exhaustively (orders run fewest switches first); when sampling, true when the
   * search below fast-check's counterexample finished within `minimizeRuns`.
   */
  readonly minimal: boolean;
}

/** What {@link explore} found. */
export interface ExploreReport {
  /** No interleaving run broke the invariant. */
  readonly passed: boolean;
  /** Every interleaving was run (else a sample, shrunk to a minimal failing one). */
  readonly exhaustive: boolean;
  /** How many interleavings exist. */
  readonly interleavings: bigint;
  /** How many were run (when sampling: the samples, the shrinking, and the search for fewer switches). */
  readonly runs: number;
  /** The first interleaving that broke the invariant (shrunk when sampled); absent when it passed. */
  readonly counterexample?: ExploreCounterexample;
}

type Parsed = z.output<typeof exploreOptionsSchema>;

function scheduleStep(
  session: string,
  step: ExploreStep,
): readonly [string, string] | readonly [string, string, readonly unknown[]] {
  return typeof step === 'string' ? [session, step] : [session, step[0], step[1]];
}

/** One interleaving on a fresh state: setup, the steps through the Schedule, the invariant, teardown. */
class Runner {
  #schedule: Schedule | undefined;
  readonly #control: pg.Client;
  readonly #options: Parsed;
  runs = 0;

  constructor(control: pg.Client, options: Parsed) {
    this.#control = control;
    this.#options = options;
  }

  async #open(): Promise<Schedule> {
    if (this.#schedule) return this.#schedule;
    const sessions = Object.keys(this.#options.sessions);
    const schedule = await Schedule.open(this.#options.url, {
      whenSessionBlocked: 'defer',
      ...this.#options.schedule,
      sessions,
    });
    if (this.#options.sessionSetup !== undefined) {
      const setup = this.#options.sessionSetup;
      await schedule.run(sessions.map((s) => [s, setup] as const));
    }
    this.#schedule = schedule;
    return schedule;
  }

  /** Runs one interleaving; a counterexample when the invariant breaks (or the schedule fails). */
  async run(merged: readonly Interleaved<string, ExploreStep>[]): Promise<ExploreCounterexample | undefined> {
    this.runs++;
    // the setup builds the state every interleaving starts from
    await this.#control.query(this.#options.setup);
    let outcomes: StepOutcome[] = [];
    let reason: string | undefined;
    const schedule = await this.#open();
    try {
      outcomes = await schedule.run(merged.map(([session, step]) => scheduleStep(session, step)));
      // nothing of this interleaving stays open into the next one
      await schedule.run(Object.keys(this.#options.sessions).map((s) => [s, 'ROLLBACK'] as const));
    } catch (error) {
      reason = `the schedule failed: ${error instanceof Error ? error.message : String(error)}`;
      await schedule.close();
      this.#schedule = undefined;
    }
    if (reason === undefined) {
      const verdict = await this.#options.invariant(this.#control, outcomes);
      if (verdict !== true) reason = verdict === false ? 'the invariant does not hold' : verdict;
    }
    if (this.#options.teardown !== undefined) await this.#control.query(this.#options.teardown);
    if (reason === undefined) return undefined;
    const table = `${outcomes.length > 0 ? `${formatOutcomes(outcomes)}\n` : ''}=> ${reason}`;
    return {
      interleaving: merged,
      outcomes,
      reason,
      table,
      switches: contextSwitches(merged),
      minimal: false,
    };
  }

  async close(): Promise<void> {
    await this.#schedule?.close();
  }
}

/**
 * Runs the orders with fewer context switches than `found`, fewest first, at most `limit` of them:
 * the first that fails replaces it. Minimal when the search ran out of orders before the limit.
 */
async function fewerSwitches(
  runner: Runner,
  sessions: Record<string, readonly ExploreStep[]>,
  found: ExploreCounterexample,
  limit: number,
): Promise<ExploreCounterexample> {
  let tried = 0;
  for (const merged of interleavingsByFewestSwitches(sessions, found.switches - 1)) {
    if (tried >= limit) return found;
    tried++;
    const counterexample = await runner.run(merged);
    if (counterexample) return { ...counterexample, minimal: true };
  }
  return { ...found, minimal: true };
}

/**
 * Explores the interleavings of several sessions' steps: every order that keeps each session's own
 * order is run through {@link Schedule} (a session blocked on a lock has its next steps sent once it
 * is free, as a real client would) on the state `setup` builds, and `invariant` is checked after
 * each. When there are at most `exhaustiveLimit` interleavings every one is run, fewest context
 * switches first (the serial orders, then one switch more, …), so the first failing order reported
 * has the fewest switches that still fail. Otherwise `numRuns` are sampled with fast-check (pass
 * `fc`), a failure is shrunk by fast-check, then the orders with fewer switches than the shrunk one
 * are run, fewest first (at most `minimizeRuns`), and the first that fails is reported. The report's
 * `counterexample.table` shows the failing order step by step, `switches` its context switches,
 * `minimal` whether no order with fewer switches fails, and `runs` how many orders were tried.
 *
 * @example
 * const report = await explore({
 *   url,
 *   setup: 'DROP TABLE IF EXISTS acct; CREATE TABLE acct (id int PRIMARY KEY, n int); INSERT INTO acct VALUES (1, 100)',
 *   sessions: {
 *     t1: ['begin', 'update acct set n = n - 70 where id = 1 and n >= 70', 'commit'],
 *     t2: ['begin', 'update acct set n = n - 70 where id = 1 and n >= 70', 'commit'],
 *   },
 *   invariant: async (db) => {
 *     const { rows } = await db.query('SELECT n FROM acct WHERE id = 1');
 *     return Number(rows[0]?.n) >= 0 || `balance ${rows[0]?.n}`;
 *   },
 * });
 * if (!report.passed) console.log(report.counterexample?.table);
 */
export async function explore(options: ExploreOptions): Promise<ExploreReport> {
  const parsed = parseOptions(exploreOptionsSchema, options);
  if (parsed.isErr()) throw parsed.error;
  const opts = parsed.value;
  const sessions = opts.sessions as Record<string, readonly ExploreStep[]>;
  const count = interleavingCount(sessions);
  const exhaustive = count <= BigInt(opts.exhaustiveLimit);
  if (!exhaustive && !opts.fc) {
    throw new RangeError(
      `${count} interleavings is more than exhaustiveLimit (${opts.exhaustiveLimit}): pass fc (fast-check) to sample them`,
    );
  }
  const control = new pg.Client({ connectionString: opts.url, application_name: 'pg-txkit-explore:control' });
  control.on('error', () => {});
  await control.connect();
  const runner = new Runner(control, opts);
  try {
    if (exhaustive) {
      for (const merged of interleavingsByFewestSwitches(sessions)) {
        const counterexample = await runner.run(merged);
        if (counterexample)
          return {
            passed: false,
            exhaustive,
            interleavings: count,
            runs: runner.runs,
            counterexample: { ...counterexample, minimal: true },
          };
      }
      return { passed: true, exhaustive, interleavings: count, runs: runner.runs };
    }
    // `fc` passed the structural check of ExploreFastCheck; it is the fast-check module.
    const fc = opts.fc as unknown as FastCheckSampler;
    let last: ExploreCounterexample | undefined;
    const result = await fc.check(
      fc.asyncProperty(interleavings(fc, sessions), async (merged) => {
        const counterexample = await runner.run(merged);
        if (counterexample) last = counterexample;
        return counterexample === undefined;
      }),
      { numRuns: opts.numRuns, ...(opts.seed === undefined ? {} : { seed: opts.seed }) },
    );
    if (result.failed && result.counterexample) {
      // the shrunk counterexample, run once more so its outcomes and table are the ones reported
      const [merged] = result.counterexample;
      const shrunk = (await runner.run(merged)) ?? last;
      const counterexample = shrunk
        ? await fewerSwitches(runner, sessions, shrunk, opts.minimizeRuns)
        : undefined;
      return {
        passed: false,
        exhaustive,
        interleavings: count,
        runs: runner.runs,
        ...(counterexample ? { counterexample } : {}),
      };
    }
    return { passed: !result.failed, exhaustive, interleavings: count, runs: runner.runs };
  } finally {
    await runner.close();
    await control.end().catch(() => {});
  }
}
