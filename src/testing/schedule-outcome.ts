// What a Schedule reports for each step, in a file of its own: the Schedule (schedule.ts) produces
// these and formatOutcomes (format-outcomes.ts) prints them, and neither imports the other for it.

/** The result of one statement of a step (a step may hold several statements). */
export interface StatementResult {
  /** The command tag's verb (`SELECT`, `UPDATE`…), or `null` for an empty query. */
  readonly command: string | null;
  /** pg's `rowCount` (`null` for commands without one). */
  readonly rowCount: number | null;
  /** Column names, in order (duplicates kept). */
  readonly columns: readonly string[];
  /** The rows as arrays of values, in column order. */
  readonly values: readonly (readonly unknown[])[];
}

/** What happened to one step of `Schedule.run`. */
export interface StepOutcome {
  /** The session that ran the step. */
  readonly session: string;
  /** The step's SQL, as given. */
  readonly sql: string;
  /** The step's name, when it was given one. */
  readonly name?: string;
  /**
   * The step was reported waiting: the monitor saw it wait on a lock (or a safe snapshot) held by
   * another session of the schedule, or a blocker annotation held it.
   */
  readonly blocked: boolean;
  /** `ok`, or `error` when the server (or the connection) failed the statement. */
  readonly status: 'ok' | 'error';
  /** Rows of the (last) statement; `[]` for an error. */
  readonly rows: readonly Record<string, unknown>[];
  /** pg's `rowCount` of the (last) statement (`null` for commands without one and for errors). */
  readonly rowCount: number | null;
  /** Every statement's result, in order (`[]` for an error: pg drops the results before it). */
  readonly results: readonly StatementResult[];
  /** SQLSTATE of the error (`40001`, `40P01`, `55P03`…), or the socket error code. */
  readonly code?: string;
  /** Error message. */
  readonly message?: string;
  /** Severity of a server error (`ERROR`, `FATAL`). */
  readonly severity?: string;
  /**
   * Notices the session received while the step ran, or while it was idle before the step
   * (`NOTICE:  text`, then `DETAIL:  …` and `HINT:  …` lines when the server sent them, as libpq
   * formats them).
   */
  readonly notices: readonly string[];
  /**
   * For a blocked step: how many of `notices` had arrived when it was reported waiting (the
   * isolation tester prints those before the `<waiting ...>` line, those read while it waited where
   * `noticesWhileWaiting` says, the rest at its completion).
   */
  readonly noticesBeforeWaiting?: number;
  /**
   * For a blocked step: notices that arrived while it waited and were read when the schedule looked
   * at it again (after a later step) and it still waited, in the order they were read. The isolation
   * tester prints them then, not at the step's completion.
   */
  readonly noticesWhileWaiting?: readonly NoticesWhileWaiting[];
  /** NOTIFY messages the session received up to the step's completion (it must have run LISTEN). */
  readonly notifications: readonly StepNotification[];
  /** For a blocked step: index of the step after which it finished. */
  readonly completedAfter?: number;
  /** Rank of this step's completion among all the steps of the run (0-based). */
  readonly completionOrder: number;
  /**
   * With `whenSessionBlocked: 'defer'`, for a step held back because its session was blocked:
   * index of the step after which it was really sent.
   */
  readonly sentAfter?: number;
}

/** A NOTIFY message a session received: its channel, payload and the sending backend's pid. */
export interface StepNotification {
  /** The channel it was sent on (the name given to NOTIFY and LISTEN). */
  readonly channel: string;
  /** The payload, as sent (`''` when NOTIFY gave none). */
  readonly payload: string;
  /** The process id (pid) of the backend that sent it, as `pg_backend_pid()` reports it there. */
  readonly processId: number;
}

/**
 * Notices a waiting step's session sent while it waited, read when the schedule looked at the step
 * again after step `after` and found it still waiting (see `StepOutcome.noticesWhileWaiting`).
 */
export interface NoticesWhileWaiting {
  /** Index of the step after which they were read. */
  readonly after: number;
  /** How many of the step's `notices` were read then (those after the ones read before). */
  readonly count: number;
  /** How many of the step's `notices` had been read by then, in all. */
  readonly upTo: number;
  /** How many steps of the run had completed when they were read (`completionOrder` of the next). */
  readonly beforeCompletion: number;
  /** Rank among all the notices read while waiting in the run (0-based). */
  readonly order: number;
}
