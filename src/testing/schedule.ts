import pg from 'pg';
import { z } from 'zod/v4';
import { InvalidOptions } from '../errors/index.js';
import { formatOutcomes } from './format-outcomes.js';

/**
 * One step of a schedule: the session that runs it, its SQL (one statement, or several separated by
 * `;` when there are no parameters) and optional parameters (`$1`, `$2`, …).
 */
export type ScheduleStep<S extends string = string> =
  | readonly [session: S, sql: string]
  | readonly [session: S, sql: string, params: readonly unknown[]];

/** What happened to one step of {@link Schedule.run}. */
export interface StepOutcome {
  /** The session that ran the step. */
  readonly session: string;
  /** The step's SQL, as given. */
  readonly sql: string;
  /** The monitor saw the step wait on a lock (or a safe snapshot) before it finished. */
  readonly blocked: boolean;
  /** `ok`, or `error` when the server (or the connection) failed the statement. */
  readonly status: 'ok' | 'error';
  /** Rows of the (last) statement; `[]` for an error. */
  readonly rows: readonly Record<string, unknown>[];
  /** pg's `rowCount` of the (last) statement (`null` for commands without one and for errors). */
  readonly rowCount: number | null;
  /** SQLSTATE of the error (`40001`, `40P01`, `55P03`…), or the socket error code. */
  readonly code?: string;
  /** Error message. */
  readonly message?: string;
  /** For a blocked step: index of the step after which it finished. */
  readonly completedAfter?: number;
  /**
   * With `whenSessionBlocked: 'defer'`, for a step held back because its session was blocked:
   * index of the step after which it was really sent.
   */
  readonly sentAfter?: number;
}

/** Why a {@link Schedule} could not go on. */
export type ScheduleErrorReason =
  /** A step was neither finished nor blocked within `stepTimeoutMs`. */
  | 'step-timeout'
  /** A blocked step the schedule had to wait for stayed blocked longer than `blockTimeoutMs`. */
  | 'block-timeout'
  /** `whenSessionBlocked: 'error'`: a step was sent to a session still blocked in an earlier step. */
  | 'session-blocked'
  /** A malformed step (unknown session, empty SQL), or the schedule is closed, broken or busy. */
  | 'usage';

/** A schedule could not go on: a step timed out, or a step is malformed. Names the step. */
export class ScheduleError extends Error {
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
    /** Interval of the monitor's checks while a step runs. Default 5 ms. */
    pollMs: z.number().int().min(1).max(1000).default(5),
    /** `application_name` prefix of the connections (`<prefix>:<session>`). Default `pg-txkit-schedule`. */
    applicationName: z.string().min(1).max(40).default('pg-txkit-schedule'),
  })
  .strict();

/** Options of {@link Schedule.open}. */
export type ScheduleOptions = z.input<typeof scheduleOptionsSchema>;

type StepResult =
  | { readonly status: 'ok'; readonly rows: Record<string, unknown>[]; readonly rowCount: number | null }
  | { readonly status: 'error'; readonly code?: string; readonly message: string };

interface Running {
  readonly index: number;
  readonly session: Session;
  readonly sql: string;
  readonly done: Promise<void>;
  result: StepResult | undefined;
  blocked: boolean;
}

interface Session {
  readonly name: string;
  readonly client: pg.Client;
  readonly pid: number;
  /** The step still running on this session (only ever a blocked one between steps). */
  running: Running | undefined;
}

/**
 * Reads the lock manager's view of the sessions (no heavyweight lock taken): a session is blocked
 * when some backend holds or awaits a lock it waits for (row locks show up as `transactionid` waits,
 * advisory locks included), or when it waits for a safe snapshot (`SERIALIZABLE READ ONLY DEFERRABLE`).
 */
const BLOCKED_SQL = `SELECT pid FROM unnest($1::int[]) AS pid
  WHERE cardinality(pg_blocking_pids(pid)) > 0 OR cardinality(pg_safe_snapshot_blocking_pids(pid)) > 0`;

function errorResult(error: unknown): StepResult {
  const e = error as { code?: unknown; message?: unknown };
  const message = typeof e?.message === 'string' ? e.message : String(error);
  return typeof e?.code === 'string'
    ? { status: 'error', code: e.code, message }
    : { status: 'error', message };
}

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

/**
 * PostgreSQL's isolation tester, from TypeScript: N named sessions on dedicated connections and one
 * monitor connection. {@link Schedule.run} sends the steps in order; after sending a step it waits
 * until the step finishes or the monitor sees it wait on a lock (`pg_blocking_pids`). A blocked step
 * is reported `blocked: true`, the schedule moves on, and its result is recorded when a later step
 * releases it (`completedAfter`). After every step, steps released by it are given the time to
 * finish (or to block again) before the next step is sent, so outcomes are deterministic.
 *
 * A step for a session whose previous step is still blocked first waits for it (up to
 * `blockTimeoutMs`, e.g. while the deadlock detector picks a victim), then fails with a
 * {@link ScheduleError} naming both steps; `whenSessionBlocked` can make it fail at once
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
          const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          const pid = rows[0]?.pid;
          if (pid === undefined) throw new Error('pg_backend_pid() returned no row');
          sessions.set(name, { name, client, pid, running: undefined });
        }),
      );
      return new Schedule<N>(sessions, monitor, opts);
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
    steps.forEach((step, i) => {
      const [session, sql, params] = step;
      if (!this.#sessions.has(session)) {
        throw new ScheduleError(i, `step ${i}: unknown session ${JSON.stringify(session)}`);
      }
      if (typeof sql !== 'string' || sql.trim() === '') throw new ScheduleError(i, `step ${i}: empty SQL`);
      if (params !== undefined && !Array.isArray(params)) {
        throw new ScheduleError(i, `step ${i}: params must be an array`);
      }
    });
    this.#running = true;
    try {
      return await this.#run(steps);
    } catch (error) {
      this.#broken = error instanceof Error ? error.message : String(error);
      throw error;
    } finally {
      this.#running = false;
    }
  }

  async #run(steps: readonly ScheduleStep<S>[]): Promise<StepOutcome[]> {
    const { blockTimeoutMs, whenSessionBlocked } = this.#options;
    const outcomes: StepOutcome[] = [];
    const blocked = new Set<Running>();
    const deferred = new Map<
      Session,
      { index: number; sql: string; params: readonly unknown[] | undefined }[]
    >();
    const sentAfter = new Map<number, number>();
    const record = (r: Running, completedAfter: number | undefined): void => {
      const result = r.result;
      if (!result) throw new Error('internal: recording a step that has not finished');
      const sent = sentAfter.get(r.index);
      const base = {
        session: r.session.name,
        sql: r.sql,
        blocked: r.blocked,
        ...(sent === undefined ? {} : { sentAfter: sent }),
      };
      const after = r.blocked && completedAfter !== undefined ? { completedAfter } : {};
      outcomes[r.index] =
        result.status === 'ok'
          ? { ...base, status: 'ok', rows: result.rows, rowCount: result.rowCount, ...after }
          : {
              ...base,
              status: 'error',
              rows: [],
              rowCount: null,
              ...(result.code === undefined ? {} : { code: result.code }),
              message: result.message,
              ...after,
            };
      blocked.delete(r);
      if (r.session.running === r) r.session.running = undefined;
    };
    const execute = async (
      session: Session,
      index: number,
      sql: string,
      params: readonly unknown[] | undefined,
    ): Promise<void> => {
      const running = this.#send(session, index, sql, params);
      await this.#settle(running, index);
      if (running.blocked) blocked.add(running);
      else record(running, undefined);
      await this.#settleReleased(blocked, index, record);
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
          await execute(session, next.index, next.sql, next.params);
          after = next.index;
          moved = true;
        }
      }
    };

    for (const [index, step] of steps.entries()) {
      const [name, sql, params] = step;
      const session = this.#session(name);
      // a blocked step that finished on its own since (lock_timeout, the deadlock detector)
      for (const r of [...blocked]) if (r.result) record(r, index - 1);
      const previous = session.running;
      if (previous || (deferred.get(session)?.length ?? 0) > 0) {
        if (whenSessionBlocked === 'defer') {
          const queue = deferred.get(session) ?? [];
          queue.push({ index, sql, params });
          deferred.set(session, queue);
          continue;
        }
        if (previous && whenSessionBlocked === 'error') {
          throw new ScheduleError(
            index,
            `${describeStep(index, name, sql)} cannot be sent: session ${name} is blocked in ` +
              `${describeStep(previous.index, name, previous.sql)} (an impossible order: send the step that releases it first)`,
            'session-blocked',
          );
        }
        if (previous) {
          // 'wait', as the isolation tester does: e.g. the deadlock detector or lock_timeout ends it.
          await this.#waitFinished(
            [previous],
            blockTimeoutMs,
            (r) =>
              `${describeStep(index, name, sql)} cannot be sent: session ${name} is still blocked in ` +
              `${describeStep(r.index, name, r.sql)} after ${blockTimeoutMs} ms (send the step that releases it first)`,
          );
          // it, and whatever else finished meanwhile, finished before this step was sent
          for (const r of [...blocked]) if (r.result) record(r, index - 1);
        }
      }
      await execute(session, index, sql, params);
      await drain(index);
    }

    // The end of the schedule: every blocked step must finish now (and deferred steps run).
    const last = steps.length - 1;
    for (;;) {
      await drain(last);
      if (blocked.size === 0) break;
      await this.#waitFinished(
        [...blocked],
        blockTimeoutMs,
        (r) =>
          `${describeStep(r.index, r.session.name, r.sql)} is still blocked at the end of the schedule after ${blockTimeoutMs} ms`,
        'any',
      );
      for (const r of [...blocked]) if (r.result) record(r, last);
    }
    this.#last = outcomes;
    return outcomes;
  }

  #session(name: string): Session {
    const session = this.#sessions.get(name);
    if (!session) throw new ScheduleError(-1, `unknown session ${JSON.stringify(name)}`);
    return session;
  }

  #send(session: Session, index: number, sql: string, params: readonly unknown[] | undefined): Running {
    const running: Running = {
      index,
      session,
      sql,
      result: undefined,
      blocked: false,
      done: session.client.query(sql, params === undefined ? undefined : [...params]).then(
        (res: pg.QueryResult | pg.QueryResult[]) => {
          const last = Array.isArray(res) ? res[res.length - 1] : res;
          running.result = { status: 'ok', rows: last?.rows ?? [], rowCount: last?.rowCount ?? null };
        },
        (error: unknown) => {
          running.result = errorResult(error);
        },
      ),
    };
    session.running = running;
    return running;
  }

  /** pids among `pids` that the monitor sees waiting on a lock right now. */
  async #blockedPids(pids: readonly number[]): Promise<Set<number>> {
    const { rows } = await this.#monitor.query<{ pid: number }>({
      name: 'pg_txkit_schedule_blocked',
      text: BLOCKED_SQL,
      values: [pids],
    });
    return new Set(rows.map((r) => r.pid));
  }

  /** Waits until the step just sent finishes or is seen blocked. */
  async #settle(running: Running, index: number): Promise<void> {
    const { stepTimeoutMs, pollMs } = this.#options;
    const started = performance.now();
    await waitAny([running.done], 1);
    for (;;) {
      if (running.result) return;
      const blocked = await this.#blockedPids([running.session.pid]);
      if (blocked.has(running.session.pid)) {
        running.blocked = true;
        return;
      }
      if (running.result) return;
      if (performance.now() - started > stepTimeoutMs) {
        throw new ScheduleError(
          index,
          `${describeStep(index, running.session.name, running.sql)} neither finished nor blocked within ${stepTimeoutMs} ms`,
          'step-timeout',
        );
      }
      await waitAny([running.done], pollMs);
    }
  }

  /**
   * After step `index`: every blocked step either finished (recorded as completed after `index`)
   * or is seen blocked again. A step woken up is given `stepTimeoutMs` to do one or the other.
   */
  async #settleReleased(
    blocked: Set<Running>,
    index: number,
    record: (r: Running, completedAfter: number) => void,
  ): Promise<void> {
    const { stepTimeoutMs, pollMs } = this.#options;
    const started = performance.now();
    for (;;) {
      for (const r of [...blocked]) if (r.result) record(r, index);
      if (blocked.size === 0) return;
      const waiting = await this.#blockedPids([...blocked].map((r) => r.session.pid));
      for (const r of [...blocked]) if (r.result) record(r, index);
      const moving = [...blocked].filter((r) => !waiting.has(r.session.pid));
      if (moving.length === 0) return;
      if (performance.now() - started > stepTimeoutMs) {
        const r = moving[0] as Running;
        throw new ScheduleError(
          r.index,
          `${describeStep(r.index, r.session.name, r.sql)} was released after step ${index} but neither finished nor blocked again within ${stepTimeoutMs} ms`,
          'step-timeout',
        );
      }
      await waitAny(
        moving.map((r) => r.done),
        pollMs,
      );
    }
  }

  /** Waits until all (or any) of `running` finished, at most `timeoutMs`; else names the first still blocked. */
  async #waitFinished(
    running: readonly Running[],
    timeoutMs: number,
    describe: (r: Running) => string,
    until: 'all' | 'any' = 'all',
  ): Promise<void> {
    const started = performance.now();
    for (;;) {
      const open = running.filter((r) => !r.result);
      const first = open[0];
      if (!first || (until === 'any' && open.length < running.length)) return;
      const left = timeoutMs - (performance.now() - started);
      if (left <= 0) throw new ScheduleError(first.index, describe(first), 'block-timeout');
      await waitAny(
        open.map((r) => r.done),
        left,
      );
    }
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
