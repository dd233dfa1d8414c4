import pg from 'pg';
import { z } from 'zod/v4';
import { InvalidOptions } from '../errors/index.js';
import { formatOutcomes } from './format-outcomes.js';
import type {
  NoticesWhileWaiting,
  StatementResult,
  StepNotification,
  StepOutcome,
} from './schedule-outcome.js';

export type {
  NoticesWhileWaiting,
  StatementResult,
  StepNotification,
  StepOutcome,
} from './schedule-outcome.js';

/**
 * One step of a schedule: the session that runs it, its SQL (one statement, or several separated by
 * `;` when there are no parameters; an empty string is sent as an empty query) and optional
 * parameters (`$1`, `$2`, …). The object form {@link ScheduleStepSpec} adds a name and the
 * isolation tester's step annotations.
 */
export type ScheduleStep<S extends string = string> =
  | readonly [session: S, sql: string]
  | readonly [session: S, sql: string, params: readonly unknown[]]
  | ScheduleStepSpec<S>;

/**
 * A blocker annotation of the isolation tester, on a step of a permutation:
 * - `'*'`: report the step as waiting when it is sent, even if it would finish at once (its
 *   completion is then reported after a later step: output that does not depend on speed);
 * - a step name: the step is not reported complete while that step is still running;
 * - `{ step, notices }`: not reported complete until the session of `step` has received `notices`
 *   more notices than when this step was sent.
 */
export type StepBlocker = '*' | string | { readonly step: string; readonly notices: number };

/** A step in object form: what the tuple form says, plus a name and blocker annotations. */
export interface ScheduleStepSpec<S extends string = string> {
  /** The session that runs the step. */
  readonly session: S;
  /** The statement. */
  readonly sql: string;
  /** Its parameters (`$1`, `$2`, …). */
  readonly params?: readonly unknown[];
  /** The step's name, which other steps' `blockers` refer to. */
  readonly name?: string;
  /** The isolation tester's annotations (`(*)`, `(other_step)`, `(other_step notices N)`). */
  readonly blockers?: readonly StepBlocker[];
}

/** Why a {@link Schedule} could not go on. */
export type ScheduleErrorReason =
  /** A step was neither finished nor blocked within `stepTimeoutMs`. */
  | 'step-timeout'
  /** A blocked step the schedule had to wait for stayed blocked longer than `blockTimeoutMs`. */
  | 'block-timeout'
  /** `whenSessionBlocked: 'error'`: a step was sent to a session still blocked in an earlier step. */
  | 'session-blocked'
  /** A malformed step (unknown session, bad blocker), or the schedule is closed, broken or busy. */
  | 'usage';

/** A schedule could not go on: a step timed out, or a step is malformed. Names the step. */
export class ScheduleError extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'ScheduleError';
  /** Index of the step concerned (in the `run()` call), `-1` when not about one step. */
  readonly step: number;
  /** Why. */
  readonly reason: ScheduleErrorReason;
  constructor(step: number, message: string, reason: ScheduleErrorReason = 'usage') {
    super(message);
    this.step = step;
    this.reason = reason;
  }
}

const SESSION_NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,39}$/;

const scheduleOptionsSchema = z
  .object({
    /** Names of the sessions; each gets its own dedicated connection. */
    sessions: z
      .array(z.string().regex(SESSION_NAME, 'a session name is a short identifier'))
      .min(1)
      .refine((names) => new Set(names).size === names.length, 'session names must be unique'),
    /**
     * How long a step just sent may be neither finished nor seen blocked (and how long a step woken
     * up by another step may run) before `run()` fails naming it. Default 10 000 ms.
     */
    stepTimeoutMs: z.number().int().positive().max(3_600_000).default(10_000),
    /**
     * How long a blocked step may stay blocked when the schedule has to wait for it: a later step
     * of the same session, or the end of `run()`. Default 10 000 ms.
     */
    blockTimeoutMs: z.number().int().positive().max(3_600_000).default(10_000),
    /**
     * What a step does when its session is still blocked in an earlier step:
     * - `'wait'` (default, like PostgreSQL's isolation tester): wait for that step to finish (the
     *   deadlock detector or `lock_timeout` may end it) up to `blockTimeoutMs`, then fail;
     * - `'error'`: fail at once with reason `session-blocked` (an impossible order, e.g. one drawn by
     *   `interleavings()`: skip it);
     * - `'defer'`: hold the step (and the session's next ones) back and send it as soon as the
     *   session is free again, as a real client would: every order becomes possible. The outcome
     *   says when it was sent (`sentAfter`).
     */
    whenSessionBlocked: z.enum(['wait', 'error', 'defer']).default('wait'),
    /**
     * Whose locks make a step count as blocked:
     * - `'sessions'` (default, the isolation tester's rule, `pg_isolation_test_session_is_blocked`):
     *   only the schedule's own sessions. A wait on anything else (autovacuum, the monitor's own
     *   snapshot that `CREATE INDEX CONCURRENTLY` waits for, a connection of the test) is not a
     *   block: the step is given `stepTimeoutMs` to finish;
     * - `'any'`: any backend but the monitor, for a test that holds a lock from a connection of
     *   its own while the schedule runs.
     */
    blockers: z.enum(['sessions', 'any']).default('sessions'),
    /**
     * `'parsed'` (default): values come through pg's type parsers (numbers, Dates, arrays);
     * `'text'`: every value is the server's text, as psql prints it.
     */
    values: z.enum(['parsed', 'text']).default('parsed'),
    /** Interval of the monitor's checks while a step runs. Default 5 ms. */
    pollMs: z.number().int().min(1).max(1000).default(5),
    /**
     * Startup options of every connection (libpq's `options`, e.g. `-c intervalstyle=postgres_verbose`):
     * settings a `RESET` returns to. Default none.
     */
    connectionOptions: z.string().max(1000).optional(),
    /** `application_name` prefix of the connections (`<prefix>:<session>`). Default `pg-txkit-schedule`. */
    applicationName: z.string().min(1).max(40).default('pg-txkit-schedule'),
  })
  .strict();

/** Options of {@link Schedule.open}. */
export type ScheduleOptions = z.input<typeof scheduleOptionsSchema>;

type StepResult =
  | {
      readonly status: 'ok';
      readonly rows: Record<string, unknown>[];
      readonly rowCount: number | null;
      readonly results: StatementResult[];
    }
  | {
      readonly status: 'error';
      readonly code?: string;
      readonly message: string;
      readonly severity?: string;
    };

interface Step {
  readonly index: number;
  readonly session: Session;
  readonly sql: string;
  readonly params: readonly unknown[] | undefined;
  readonly name: string | undefined;
  readonly blockers: readonly StepBlocker[];
}

interface Running {
  readonly step: Step;
  readonly session: Session;
  /** Settles (never rejects) once the session is idle again: after ReadyForQuery. */
  readonly done: Promise<void>;
  result: StepResult | undefined;
  /** Reported waiting (seen blocked, or held by a blocker annotation). */
  blocked: boolean;
  /** Notices received when it was first reported waiting. */
  noticesBeforeWaiting: number | undefined;
  /** Notices read while it waited, each time it was looked at again and still waited. */
  readonly noticeMarks: NoticesWhileWaiting[];
  readonly notices: string[];
  /** Per `{ step, notices }` blocker: the notice count its session must reach. */
  readonly noticeTargets: ReadonlyMap<Session, number>;
}

interface Session {
  readonly name: string;
  readonly client: pg.Client;
  readonly pid: number;
  /** The step still running on this session (only ever a waiting one between steps). */
  running: Running | undefined;
  /** Notices received since the session was opened. */
  notices: number;
  /** Notices received while no step ran: they belong to the next step. */
  idleNotices: string[];
  /** NOTIFY messages received and not yet reported with a step's completion. */
  notifications: StepNotification[];
}

/** Reports a step waiting; the first time, remembers how many notices came before. */
function markWaiting(r: Running): void {
  if (!r.blocked) r.noticesBeforeWaiting = r.notices.length;
  r.blocked = true;
}

/** A notice as libpq's default verbosity prints it: severity and message, then DETAIL and HINT lines. */
function noticeText(notice: {
  readonly severity?: string | undefined;
  readonly message?: string | undefined;
  readonly detail?: string | undefined;
  readonly hint?: string | undefined;
}): string {
  let text = `${notice.severity ?? 'NOTICE'}:  ${notice.message ?? ''}`;
  if (notice.detail) text += `\nDETAIL:  ${notice.detail}`;
  if (notice.hint) text += `\nHINT:  ${notice.hint}`;
  return text;
}

/**
 * The isolation tester's test (no heavyweight lock taken): a session is blocked when one of the
 * schedule's own sessions holds or awaits a lock it waits for (row locks show up as `transactionid`
 * waits, advisory locks included), or when it waits for a safe snapshot (`SERIALIZABLE READ ONLY
 * DEFERRABLE`). `pg_isolation_test_session_is_blocked` is the function isolationtester itself calls.
 */
const BLOCKED_BY_SESSIONS_SQL = `SELECT pid FROM unnest($1::int[]) AS pid
  WHERE pg_catalog.pg_isolation_test_session_is_blocked(pid, $2::int[])`;

/** As above, with any backend but the monitor itself (`pg_backend_pid()`) counted as a blocker. */
const BLOCKED_BY_ANY_SQL = `SELECT pid FROM unnest($1::int[]) AS pid
  WHERE EXISTS (SELECT 1 FROM unnest(pg_catalog.pg_blocking_pids(pid)) AS b WHERE b <> pg_backend_pid())
     OR cardinality(pg_catalog.pg_safe_snapshot_blocking_pids(pid)) > 0`;

function errorResult(error: unknown): StepResult {
  const e = error as { code?: unknown; message?: unknown; severity?: unknown };
  const message = typeof e?.message === 'string' ? e.message : String(error);
  return {
    status: 'error',
    message,
    ...(typeof e?.code === 'string' ? { code: e.code } : {}),
    ...(typeof e?.severity === 'string' ? { severity: e.severity } : {}),
  };
}

interface RawResult {
  readonly command?: string | null;
  readonly rowCount?: number | null;
  readonly fields?: readonly { readonly name: string }[];
  readonly rows?: readonly unknown[];
}

function statementResult(res: RawResult): StatementResult {
  const values = (res.rows ?? []).map((row) => (Array.isArray(row) ? row : []));
  return {
    command: typeof res.command === 'string' && res.command !== '' ? res.command : null,
    rowCount: res.rowCount ?? null,
    columns: (res.fields ?? []).map((f) => f.name),
    values,
  };
}

/** pg's row objects, built from array rows (a later column of the same name wins, as in pg). */
function rowObjects(result: StatementResult | undefined): Record<string, unknown>[] {
  if (!result) return [];
  return result.values.map((values) => {
    const row: Record<string, unknown> = {};
    result.columns.forEach((name, i) => {
      row[name] = values[i];
    });
    return row;
  });
}

/** Type parsers that keep every value as the server's text (`values: 'text'`). */
const textTypes: pg.CustomTypesConfig = { getTypeParser: () => (value: string) => value };

/** Resolves after `ms`, or earlier when any of `promises` settles (they must never reject). */
function waitAny(promises: readonly Promise<void>[], ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    for (const p of promises) p.then(done);
  });
}

function describeStep(index: number, session: string, sql: string): string {
  const flat = sql.replace(/\s+/g, ' ').trim();
  return `step ${index} (${session}: ${flat.length > 80 ? `${flat.slice(0, 79)}…` : flat})`;
}

function describeRunning(r: Running): string {
  return describeStep(r.step.index, r.session.name, r.step.sql);
}

/** How {@link Schedule} tries to complete a step: the isolation tester's `try_complete_step` flags. */
interface TryFlags {
  /** Return as soon as the step is seen waiting on a lock (else wait for it to finish). */
  readonly nonblock: boolean;
  /** A later look at a step already reported (no `(*)` on it, and its timeout is the block timeout). */
  readonly retry: boolean;
}

/**
 * PostgreSQL's isolation tester, from TypeScript: N named sessions on dedicated connections and one
 * monitor connection. {@link Schedule.run} sends the steps in order; after sending a step it waits
 * until the step finishes or the monitor sees it wait on a lock held by another of the schedule's
 * sessions (`pg_isolation_test_session_is_blocked`). A blocked step is reported `blocked: true`, the
 * schedule moves on, and its result is recorded when a later step releases it (`completedAfter`).
 * After every step, the waiting steps are looked at in the order they started waiting: each one
 * released is given the time to finish (or to block again) before the next step is sent. A step is
 * finished when its session is idle again (ReadyForQuery, also after an error), so a step released
 * by another step's error is always recorded after that step: outcomes do not depend on timing.
 *
 * A step for a session whose previous step is still blocked first waits for it (up to
 * `blockTimeoutMs`, e.g. while the deadlock detector picks a victim), then completes every other
 * waiting step that can finish, then is sent; `whenSessionBlocked` can make it fail at once
 * (`'error'`) or be sent when the session is free again (`'defer'`, for generated interleavings).
 * `run()` also waits for blocked steps at its end. Sessions must be direct connections (or a
 * session-mode pooler): the monitor looks them up by backend pid.
 *
 * @example
 * const s = await Schedule.open(url, { sessions: ['t1', 't2'] });
 * try {
 *   const out = await s.run([
 *     ['t1', 'begin'],
 *     ['t2', 'begin'],
 *     ['t1', 'update acct set n = n + 1 where id = 1'],
 *     ['t2', 'update acct set n = n + 1 where id = 1'], // waits for t1's row lock
 *     ['t1', 'commit'], // releases it: step 3 finishes here
 *     ['t2', 'commit'],
 *   ]);
 *   // out[3] → { session: 't2', blocked: true, status: 'ok', rowCount: 1, completedAfter: 4, … }
 * } finally {
 *   await s.close();
 * }
 */
export class Schedule<S extends string = string> {
  readonly #sessions: ReadonlyMap<string, Session>;
  readonly #monitor: pg.Client;
  readonly #options: z.output<typeof scheduleOptionsSchema>;
  #last: readonly StepOutcome[] = [];
  #running = false;
  #broken: string | undefined;
  #closed = false;

  private constructor(
    sessions: ReadonlyMap<string, Session>,
    monitor: pg.Client,
    options: z.output<typeof scheduleOptionsSchema>,
  ) {
    this.#sessions = sessions;
    this.#monitor = monitor;
    this.#options = options;
  }

  /**
   * Opens one dedicated connection per session plus the monitor. Throws `InvalidOptions` (before
   * connecting) on bad options.
   *
   * @example
   * const s = await Schedule.open(url, { sessions: ['t1', 't2'], stepTimeoutMs: 2000 });
   */
  static async open<const N extends string>(
    url: string,
    options: ScheduleOptions & { readonly sessions: readonly N[] },
  ): Promise<Schedule<N>> {
    const parsed = scheduleOptionsSchema.safeParse(options);
    if (!parsed.success) {
      throw new InvalidOptions(
        parsed.error.issues.map((i) => ({ path: i.path, message: i.message, code: i.code })),
        parsed.error,
      );
    }
    const opts = parsed.data;
    const clients: pg.Client[] = [];
    const connect = async (name: string): Promise<pg.Client> => {
      const client = new pg.Client({
        connectionString: url,
        application_name: `${opts.applicationName}:${name}`,
        ...(opts.connectionOptions === undefined ? {} : { options: opts.connectionOptions }),
        ...(opts.values === 'text' && name !== 'monitor' ? { types: textTypes } : {}),
      });
      client.on('error', () => {}); // a broken session shows up as the error of its step
      clients.push(client);
      await client.connect();
      return client;
    };
    try {
      const monitor = await connect('monitor');
      const sessions = new Map<string, Session>();
      await Promise.all(
        opts.sessions.map(async (name) => {
          const client = await connect(name);
          const { rows } = await client.query<{ pid: number | string }>('SELECT pg_backend_pid() AS pid');
          const pid = Number(rows[0]?.pid);
          if (!Number.isInteger(pid)) throw new Error('pg_backend_pid() returned no row');
          const session: Session = {
            name,
            client,
            pid,
            running: undefined,
            notices: 0,
            idleNotices: [],
            notifications: [],
          };
          client.on('notice', (notice) => {
            session.notices++;
            (session.running?.notices ?? session.idleNotices).push(noticeText(notice));
          });
          client.on('notification', (n) => {
            session.notifications.push({
              channel: n.channel,
              payload: n.payload ?? '',
              processId: n.processId,
            });
          });
          sessions.set(name, session);
        }),
      );
      // keep the order of `options.sessions`
      const ordered = new Map(opts.sessions.map((name) => [name, sessions.get(name) as Session]));
      return new Schedule<N>(ordered, monitor, opts);
    } catch (error) {
      await Promise.all(clients.map((c) => c.end().catch(() => {})));
      throw error;
    }
  }

  /** Names of the sessions, in the order given to `open`. */
  get sessions(): readonly S[] {
    return [...this.#sessions.keys()] as S[];
  }

  /**
   * Backend process id of a session (to look it up in `pg_locks` / `pg_stat_activity`).
   *
   * @example
   * await pool.query('SELECT pg_blocking_pids($1)', [s.pid('t2')]);
   */
  pid(session: S): number {
    return this.#session(session).pid;
  }

  /** Outcomes of the last `run()`. */
  get outcomes(): readonly StepOutcome[] {
    return this.#last;
  }

  /**
   * The last `run()`'s outcomes as one line per step (see {@link formatOutcomes}).
   *
   * @example
   * await s.run(steps);
   * expect(s.table()).toBe('0 t1: begin -> ok\n1 t1: select 1 as x -> ok [x=1]');
   */
  table(options?: { readonly sqlWidth?: number; readonly rows?: boolean }): string {
    return formatOutcomes(this.#last, options);
  }

  /**
   * Runs the steps in order with the isolation tester's rules and returns one outcome per step, in
   * step order. Rejects with {@link ScheduleError} naming the step when a step is neither finished
   * nor blocked within `stepTimeoutMs`, or stays blocked longer than `blockTimeoutMs` when the
   * schedule has to wait for it; after such an error the schedule can only be closed.
   *
   * @example
   * const out = await s.run([['t1', 'begin'], ['t1', 'select * from acct where id = $1 for update', [1]]]);
   */
  async run(steps: readonly ScheduleStep<S>[]): Promise<StepOutcome[]> {
    if (this.#closed) throw new ScheduleError(-1, 'the schedule is closed');
    if (this.#broken)
      throw new ScheduleError(-1, `the schedule is unusable after an earlier error: ${this.#broken}`);
    if (this.#running) throw new ScheduleError(-1, 'run() is already running on this schedule');
    const parsed = steps.map((step, i) => this.#parseStep(step, i));
    const names = new Map<string, Session>();
    for (const step of parsed) if (step.name !== undefined) names.set(step.name, step.session);
    parsed.forEach((step) => {
      for (const blocker of step.blockers) {
        const ref = typeof blocker === 'string' ? blocker : blocker.step;
        if (ref !== '*' && !names.has(ref)) {
          throw new ScheduleError(
            step.index,
            `step ${step.index}: blocker ${JSON.stringify(ref)} names no step`,
          );
        }
      }
    });
    this.#running = true;
    try {
      return await this.#run(parsed, names);
    } catch (error) {
      this.#broken = error instanceof Error ? error.message : String(error);
      throw error;
    } finally {
      this.#running = false;
    }
  }

  #parseStep(step: ScheduleStep<S>, index: number): Step {
    const spec: ScheduleStepSpec<S> = Array.isArray(step)
      ? { session: step[0], sql: step[1], ...(step[2] === undefined ? {} : { params: step[2] }) }
      : (step as ScheduleStepSpec<S>);
    const session = this.#sessions.get(spec.session);
    if (!session)
      throw new ScheduleError(index, `step ${index}: unknown session ${JSON.stringify(spec.session)}`);
    if (typeof spec.sql !== 'string')
      throw new ScheduleError(index, `step ${index}: the SQL must be a string`);
    if (spec.params !== undefined && !Array.isArray(spec.params)) {
      throw new ScheduleError(index, `step ${index}: params must be an array`);
    }
    for (const blocker of spec.blockers ?? []) {
      const ok =
        typeof blocker === 'string'
          ? blocker.length > 0
          : typeof blocker === 'object' &&
            typeof blocker.step === 'string' &&
            Number.isInteger(blocker.notices) &&
            blocker.notices >= 0;
      if (!ok)
        throw new ScheduleError(index, `step ${index}: a blocker is '*', a step name or { step, notices }`);
    }
    return {
      index,
      session,
      sql: spec.sql,
      params: spec.params,
      name: spec.name,
      blockers: spec.blockers ?? [],
    };
  }

  async #run(steps: readonly Step[], names: ReadonlyMap<string, Session>): Promise<StepOutcome[]> {
    const { blockTimeoutMs, whenSessionBlocked } = this.#options;
    const outcomes: StepOutcome[] = [];
    /** Steps reported waiting, in the order they started waiting (the isolation tester's `waiting[]`). */
    const waiting: Running[] = [];
    const deferred = new Map<Session, Step[]>();
    const sentAfter = new Map<number, number>();
    let completions = 0;
    const record = (r: Running, completedAfter: number): void => {
      const result = r.result;
      if (!result) throw new Error('internal: recording a step that has not finished');
      const sent = sentAfter.get(r.step.index);
      const base = {
        session: r.session.name,
        sql: r.step.sql,
        ...(r.step.name === undefined ? {} : { name: r.step.name }),
        blocked: r.blocked,
        notices: r.notices,
        notifications: r.session.notifications.splice(0),
        completionOrder: completions++,
        ...(sent === undefined ? {} : { sentAfter: sent }),
        ...(r.blocked ? { completedAfter, noticesBeforeWaiting: r.noticesBeforeWaiting ?? 0 } : {}),
        ...(r.noticeMarks.length > 0 ? { noticesWhileWaiting: r.noticeMarks } : {}),
      };
      outcomes[r.step.index] =
        result.status === 'ok'
          ? { ...base, status: 'ok', rows: result.rows, rowCount: result.rowCount, results: result.results }
          : {
              ...base,
              status: 'error',
              rows: [],
              rowCount: null,
              results: [],
              ...(result.code === undefined ? {} : { code: result.code }),
              message: result.message,
              ...(result.severity === undefined ? {} : { severity: result.severity }),
            };
      const at = waiting.indexOf(r);
      if (at >= 0) waiting.splice(at, 1);
      if (r.session.running === r) r.session.running = undefined;
    };
    let marks = 0;
    /**
     * A step looked at again still waits: the notices read since it was last printed are printed now,
     * as the isolation tester's notice processor prints what PQconsumeInput reads while it polls.
     */
    const stillWaiting = (r: Running, after: number): void => {
      const last = r.noticeMarks[r.noticeMarks.length - 1];
      const printed = last ? last.upTo : (r.noticesBeforeWaiting ?? 0);
      if (r.notices.length > printed) {
        r.noticeMarks.push({
          after,
          count: r.notices.length - printed,
          upTo: r.notices.length,
          beforeCompletion: completions,
          order: marks++,
        });
      }
    };
    const tryComplete = (r: Running, flags: TryFlags, after: number, waitContext?: string) =>
      this.#tryComplete(r, flags, after, record, stillWaiting, waitContext);
    /** The isolation tester's `try_complete_steps`: each waiting step in turn, until nothing moves. */
    const tryCompleteWaiting = async (
      after: number,
      nonblock: boolean,
      waitContext?: string,
    ): Promise<void> => {
      for (;;) {
        const before = waiting.length;
        const noticesBefore = this.#noticeCount();
        let annotated = false;
        for (const r of [...waiting]) {
          if (await tryComplete(r, { nonblock, retry: true }, after, waitContext)) {
            if (r.step.blockers.length > 0) annotated = true;
          }
        }
        // a step held by an annotation may have been freed by a step looked at after it
        if (!(annotated && (waiting.length < before || this.#noticeCount() > noticesBefore))) return;
      }
    };
    const execute = async (step: Step, index: number): Promise<void> => {
      const running = this.#send(step, names);
      const mustWait = await tryComplete(running, { nonblock: true, retry: false }, index);
      await tryCompleteWaiting(index, true);
      if (mustWait) waiting.push(running);
    };
    // 'defer': sends the queued steps of sessions that are free again, until nothing moves.
    const drain = async (after: number): Promise<void> => {
      for (let moved = true; moved; ) {
        moved = false;
        for (const [session, queue] of deferred) {
          const next = queue[0];
          if (!next || session.running) continue;
          queue.shift();
          sentAfter.set(next.index, after);
          await execute(next, next.index);
          after = next.index;
          moved = true;
        }
      }
    };

    for (const step of steps) {
      const { index, session } = step;
      const previous = session.running;
      if (previous || (deferred.get(session)?.length ?? 0) > 0) {
        if (whenSessionBlocked === 'defer') {
          const queue = deferred.get(session) ?? [];
          queue.push(step);
          deferred.set(session, queue);
          continue;
        }
        if (previous && whenSessionBlocked === 'error') {
          throw new ScheduleError(
            index,
            `${describeStep(index, session.name, step.sql)} cannot be sent: session ${session.name} is blocked in ` +
              `${describeRunning(previous)} (an impossible order: send the step that releases it first)`,
            'session-blocked',
          );
        }
        // 'wait', as the isolation tester does: e.g. the deadlock detector or lock_timeout ends it.
        // Then every other waiting step that can finish does, before this step is sent.
        const started = performance.now();
        const context = ` (${describeStep(index, session.name, step.sql)} cannot be sent: send the step that releases it first)`;
        while (session.running) {
          const old = session.running;
          await tryComplete(old, { nonblock: false, retry: true }, index - 1, context);
          await tryCompleteWaiting(index - 1, true);
          if (session.running && performance.now() - started > blockTimeoutMs) {
            throw new ScheduleError(
              session.running.step.index,
              `${describeStep(index, session.name, step.sql)} cannot be sent: session ${session.name} is still blocked in ` +
                `${describeRunning(session.running)} after ${blockTimeoutMs} ms (send the step that releases it first)`,
              'block-timeout',
            );
          }
        }
      }
      await execute(step, index);
      await drain(index);
    }

    // The end of the schedule: every waiting step must finish now (and deferred steps run).
    const last = steps.length - 1;
    for (;;) {
      await drain(last);
      if (waiting.length === 0) break;
      const count = waiting.length;
      await tryCompleteWaiting(last, false, ' at the end of the schedule');
      if (waiting.length === count && [...deferred.values()].every((q) => q.length === 0)) {
        const first = waiting[0] as Running;
        throw new ScheduleError(
          first.step.index,
          `${describeRunning(first)} is still held by its blocker annotations at the end of the schedule (steps that block each other)`,
          'block-timeout',
        );
      }
    }
    this.#last = outcomes;
    return outcomes;
  }

  #noticeCount(): number {
    let n = 0;
    for (const session of this.#sessions.values()) n += session.notices;
    return n;
  }

  #session(name: string): Session {
    const session = this.#sessions.get(name);
    if (!session) throw new ScheduleError(-1, `unknown session ${JSON.stringify(name)}`);
    return session;
  }

  #send(step: Step, names: ReadonlyMap<string, Session>): Running {
    const { session } = step;
    const client = session.client;
    // `(other notices N)`: N more notices on the session of `other` than it has now
    const noticeTargets = new Map<Session, number>();
    for (const blocker of step.blockers) {
      if (typeof blocker !== 'object') continue;
      const other = names.get(blocker.step);
      if (other) noticeTargets.set(other, other.notices + blocker.notices);
    }
    const running: Running = {
      step,
      session,
      result: undefined,
      blocked: false,
      noticesBeforeWaiting: undefined,
      noticeMarks: [],
      notices: session.idleNotices.splice(0),
      noticeTargets,
      done: client
        .query({
          text: step.sql,
          rowMode: 'array',
          ...(step.params === undefined ? {} : { values: [...step.params] }),
        })
        .then(
          (res: pg.QueryResult | pg.QueryResult[]) => {
            const all = (Array.isArray(res) ? res : [res]).map((r) => statementResult(r));
            const last = all[all.length - 1];
            running.result = {
              status: 'ok',
              rows: rowObjects(last),
              rowCount: last?.rowCount ?? null,
              results: all,
            };
          },
          async (error: unknown) => {
            // pg settles a failing query at ErrorResponse, before the server has finished aborting
            // (and releasing the session's locks): ReadyForQuery comes later. An empty query queued
            // behind it is answered only after that ReadyForQuery, so once it is back the session is
            // idle and whatever the failure released is released.
            await client.query('').catch(() => {});
            running.result = errorResult(error);
          },
        ),
    };
    session.running = running;
    return running;
  }

  #runningSessionOf(name: string): Session | undefined {
    for (const session of this.#sessions.values()) if (session.running?.step.name === name) return session;
    return undefined;
  }

  /** A blocker annotation still holds `r`: the step it names is running, or the notices have not come. */
  #held(r: Running): boolean {
    for (const blocker of r.step.blockers) {
      if (blocker === '*') continue;
      if (typeof blocker === 'string') {
        if (this.#runningSessionOf(blocker)) return true;
      }
    }
    for (const [session, target] of r.noticeTargets) if (session.notices < target) return true;
    return false;
  }

  /** pids among `pids` that the monitor sees waiting on a lock right now. */
  async #blockedPids(pids: readonly number[]): Promise<Set<number>> {
    const sessions = [...this.#sessions.values()].map((s) => s.pid);
    const { rows } = await this.#monitor.query<{ pid: number }>(
      this.#options.blockers === 'sessions'
        ? { name: 'pg_txkit_schedule_blocked', text: BLOCKED_BY_SESSIONS_SQL, values: [pids, sessions] }
        : { name: 'pg_txkit_schedule_blocked_any', text: BLOCKED_BY_ANY_SQL, values: [pids] },
    );
    return new Set(rows.map((r) => r.pid));
  }

  /**
   * The isolation tester's `try_complete_step`: waits until `r` finishes or (with `nonblock`) is
   * seen blocked. Returns true while the step is not complete (blocked, or held by an annotation);
   * a complete step is recorded as completed after step `after`.
   */
  async #tryComplete(
    r: Running,
    flags: TryFlags,
    after: number,
    record: (r: Running, completedAfter: number) => void,
    stillWaiting: (r: Running, after: number) => void,
    waitContext = '',
  ): Promise<boolean> {
    const { stepTimeoutMs, blockTimeoutMs, pollMs } = this.#options;
    if (!flags.retry && r.step.blockers.includes('*')) {
      markWaiting(r);
      return true;
    }
    const started = performance.now();
    const timeoutMs = flags.nonblock ? stepTimeoutMs : blockTimeoutMs;
    if (!r.result) await waitAny([r.done], Math.min(1, pollMs));
    while (!r.result) {
      if (flags.nonblock) {
        const blocked = await this.#blockedPids([r.session.pid]);
        if (r.result) break;
        if (blocked.has(r.session.pid)) {
          // as the isolation tester reads its input after the lock check: a notice sent before the
          // session blocked is in, and the step's own result may be too
          await new Promise((resolve) => setImmediate(resolve));
          if (r.result) break;
          if (flags.retry && r.blocked) stillWaiting(r, after);
          markWaiting(r);
          return true;
        }
      }
      const left = timeoutMs - (performance.now() - started);
      if (left <= 0) {
        const what = !flags.retry
          ? 'neither finished nor blocked'
          : flags.nonblock
            ? `was released after step ${after} but neither finished nor blocked again`
            : 'is still blocked';
        throw new ScheduleError(
          r.step.index,
          `${describeRunning(r)} ${what} within ${timeoutMs} ms${flags.nonblock ? '' : waitContext}`,
          flags.nonblock ? 'step-timeout' : 'block-timeout',
        );
      }
      await waitAny([r.done], flags.nonblock ? pollMs : left);
    }
    if (this.#held(r)) {
      if (flags.retry && r.blocked) stillWaiting(r, after);
      markWaiting(r);
      return true;
    }
    record(r, after);
    return false;
  }

  /**
   * Closes every connection. A session still running a statement (a step left blocked after an
   * error) is terminated from the monitor first, so nothing is left waiting on the server.
   * Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const busy = [...this.#sessions.values()].filter((s) => s.running && !s.running.result).map((s) => s.pid);
    if (busy.length > 0) {
      // pg_terminate_backend signals the backends (no lock); the 5 s timeout waits for them to exit.
      await this.#monitor
        .query('SELECT pg_terminate_backend(pid, 5000) FROM unnest($1::int[]) AS pid', [busy])
        .catch(() => {});
    }
    await Promise.all([...this.#sessions.values()].map((s) => s.client.end().catch(() => {})));
    await this.#monitor.end().catch(() => {});
  }
}
