import { err, ok, type Result } from 'neverthrow';
import pg from 'pg';
import { z } from 'zod/v4';
import type { InvalidOptions } from '../errors/index.js';
import { parseOptions } from '../errors/parse-options.js';
import { formatResultSet } from './format-result-set.js';
import {
  eachSpecPermutation,
  type IsolationSpec,
  MAX_SPEC_PERMUTATIONS,
  parseIsolationSpec,
  type SpecPermutationStep,
  type SpecSyntaxError,
  SpecTooManyPermutations,
  specPermutationCount,
  unusedSteps,
} from './isolation-spec.js';
import {
  type NoticesWhileWaiting,
  Schedule,
  type ScheduleStepSpec,
  type StatementResult,
  type StepBlocker,
  type StepOutcome,
} from './schedule.js';

const runIsolationSpecOptionsSchema = z
  .object({
    /** How long a step may be neither finished nor blocked. Default 60 000 ms. */
    stepTimeoutMs: z.number().int().positive().max(3_600_000).default(60_000),
    /** How long a blocked step may stay blocked when the run has to wait for it. Default 60 000 ms. */
    blockTimeoutMs: z.number().int().positive().max(3_600_000).default(60_000),
    /** Called with each piece of output as it is produced (e.g. to stream it to a terminal). */
    onOutput: z.custom<(text: string) => void>((v) => typeof v === 'function').optional(),
    /**
     * A spec without `permutation` lines runs every interleaving of its steps; above this many it is
     * refused before any SQL ({@link SpecTooManyPermutations}). Default {@link MAX_SPEC_PERMUTATIONS}.
     */
    maxPermutations: z.number().int().positive().max(10_000_000).default(MAX_SPEC_PERMUTATIONS),
    /**
     * The test's name, as PostgreSQL's harness gives it: connections are then named
     * `isolation/<testName>/<session>` (and `isolation/<testName>/control connection`), as
     * pg_isolation_regress and isolationtester name them. Default: `pg-txkit-isolation/<session>`.
     */
    testName: z.string().min(1).max(40).optional(),
    /**
     * Connect as PostgreSQL's harness (pg_regress) connects every test of the suite: the startup
     * settings it puts in the environment (PGDATESTYLE `Postgres, MDY`, PGTZ `America/Los_Angeles`,
     * PGOPTIONS `-c intervalstyle=postgres_verbose`), sent as the connections' startup options so a
     * spec's `RESET` returns to them. The database (`isolation_regression`), a superuser and the
     * server's `max_prepared_transactions` are the caller's (see docs/testing.md). Default false.
     */
    regressSettings: z.boolean().default(false),
  })
  .strict();

/** Options of {@link runIsolationSpec}. */
export type RunIsolationSpecOptions = z.input<typeof runIsolationSpecOptionsSchema>;

/** What {@link runIsolationSpec} printed. */
export interface IsolationSpecRun {
  /** The isolation tester's output: compare it with an expected `.out` file. */
  readonly output: string;
  /** How many permutations ran. */
  readonly permutations: number;
  /** What isolationtester writes to stderr without stopping: failed teardowns. */
  readonly warnings: readonly string[];
}

/** A spec could not be run to its end: a setup failed, or a step timed out. Carries the output so far. */
export class SpecRunError extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'SpecRunError';
  /** Discriminant, `'SpecRunError'`. */
  readonly kind = 'SpecRunError' as const;
  /** The output up to the failure. */
  readonly output: string;
  /** 0-based index of the permutation that failed. */
  readonly permutation: number;
  constructor(message: string, output: string, permutation: number, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.output = output;
    this.permutation = permutation;
  }
}

/** Type parsers that keep every value as the server's text. */
const textTypes: pg.CustomTypesConfig = { getTypeParser: () => (value: string) => value };

function toText(value: unknown): string | null {
  return value === null || value === undefined ? null : String(value);
}

function printResult(result: StatementResult | undefined): string {
  if (!result || result.columns.length === 0) return '';
  return formatResultSet({ columns: result.columns, values: result.values.map((row) => row.map(toText)) });
}

/** What libpq adds when the server closes the connection under a query. */
const LIBPQ_CONNECTION_LOST =
  'server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request.\n';

/** pg's errors for a connection that went away under a query (no server message). */
const CONNECTION_LOST = /^(Connection terminated|ECONNRESET|EPIPE)|Connection terminated unexpectedly/;

/**
 * The step's results and error, as isolationtester prints them after the step line. An error with
 * its fields is `SEVERITY:  message`; a FATAL also ends the connection, so libpq gives a second
 * result without fields, printed whole (libpq's three lines about the closed connection) with a blank
 * line after it, as isolationtester's `printf("%s\n")` does; a connection lost without a server
 * message is that second result alone. `repeatFatal`: PostgreSQL 14's libpq also repeats the FATAL
 * line in that second result (15 and later report each error once), and so do 14's expected files.
 */
function printOutcome(outcome: StepOutcome, repeatFatal: boolean): string {
  if (outcome.status === 'ok') return outcome.results.map((r) => printResult(r)).join('');
  const message = outcome.message ?? '';
  if (outcome.severity === 'FATAL') {
    return `FATAL:  ${message}\n${repeatFatal ? `FATAL:  ${message}\n` : ''}${LIBPQ_CONNECTION_LOST}\n`;
  }
  if (outcome.severity) return `${outcome.severity}:  ${message}\n`;
  if (CONNECTION_LOST.test(message) || CONNECTION_LOST.test(outcome.code ?? ''))
    return `${LIBPQ_CONNECTION_LOST}\n`;
  return `${message}\n`;
}

function blockersOf(pstep: SpecPermutationStep): StepBlocker[] {
  return pstep.blockers.map((b) =>
    b.kind === 'once' ? '*' : b.kind === 'step' ? b.step : { step: b.step, notices: b.notices },
  );
}

/**
 * A session's notices as isolationtester's notice processor prints them, `<session>: <libpq text>`,
 * as they are read: `part` 'before' those that came before a blocked step was reported waiting,
 * 'after' those read at its completion (after the ones read while it waited), 'all' every one, or
 * one batch read while it waited.
 */
function printNotices(
  o: StepOutcome,
  sessionNames: ReadonlyMap<string, string>,
  part: 'all' | 'before' | 'after' | NoticesWhileWaiting = 'all',
): string {
  const split = o.noticesBeforeWaiting ?? 0;
  const whileWaiting = o.noticesWhileWaiting ?? [];
  const readWaiting = whileWaiting[whileWaiting.length - 1]?.upTo ?? split;
  const notices =
    part === 'all'
      ? o.notices
      : part === 'before'
        ? o.notices.slice(0, split)
        : part === 'after'
          ? o.notices.slice(readWaiting)
          : o.notices.slice(part.upTo - part.count, part.upTo);
  return notices.map((n) => `${sessionNames.get(o.session) ?? o.session}: ${n}\n`).join('');
}

/** NOTIFY messages a step's session received, printed after its results, naming the sending session. */
function printNotifications(
  o: StepOutcome,
  sessionNames: ReadonlyMap<string, string>,
  senders: ReadonlyMap<number, string>,
): string {
  return o.notifications
    .map(
      (n) =>
        `${sessionNames.get(o.session) ?? o.session}: NOTIFY "${n.channel}" with payload "${n.payload}" from ${senders.get(n.processId) ?? `PID ${n.processId}`}\n`,
    )
    .join('');
}

/** Renders one permutation's outcomes in the order isolationtester prints them. */
function printSteps(
  outcomes: readonly StepOutcome[],
  sessionNames: ReadonlyMap<string, string>,
  senders: ReadonlyMap<number, string>,
  repeatFatal: boolean,
): string {
  let out = '';
  const resultsOf = (o: StepOutcome): string =>
    `${printOutcome(o, repeatFatal)}${printNotifications(o, sessionNames, senders)}`;
  // After step i, isolationtester looks at each waiting step again: it prints the notices read from a
  // step that still waits, and a step that finished with its notices and results, in the order it
  // read them (a batch read before the completion ranked k comes before it).
  const afterStep = (after: number): string[] => {
    const events: { rank: number; sub: number; text: string }[] = [];
    for (const o of outcomes) {
      if (!o.blocked) continue;
      for (const batch of o.noticesWhileWaiting ?? []) {
        if (batch.after !== after) continue;
        events.push({
          rank: batch.beforeCompletion,
          sub: batch.order,
          text: printNotices(o, sessionNames, batch),
        });
      }
      if (o.completedAfter === after) {
        events.push({
          rank: o.completionOrder,
          sub: Number.POSITIVE_INFINITY,
          text: `${printNotices(o, sessionNames, 'after')}step ${o.name ?? ''}: <... completed>\n${resultsOf(o)}`,
        });
      }
    }
    return events.sort((a, b) => a.rank - b.rank || a.sub - b.sub).map((e) => e.text);
  };
  outcomes.forEach((o, i) => {
    const name = o.name ?? String(i);
    if (o.blocked) out += `${printNotices(o, sessionNames, 'before')}step ${name}: ${o.sql} <waiting ...>\n`;
    else out += `${printNotices(o, sessionNames)}step ${name}: ${o.sql}\n${resultsOf(o)}`;
    out += afterStep(i).join('');
  });
  return out;
}

async function execText(client: pg.Client, sql: string): Promise<StatementResult | undefined> {
  const res = (await client.query({ text: sql, rowMode: 'array' })) as pg.QueryResult | pg.QueryResult[];
  // PQexec keeps only the last result of a multi-statement string
  const last = Array.isArray(res) ? res[res.length - 1] : res;
  if (!last) return undefined;
  return {
    command: last.command,
    rowCount: last.rowCount,
    columns: last.fields.map((f) => f.name),
    values: last.rows,
  };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Runs a PostgreSQL isolation test specification (the `.spec` format of PostgreSQL's
 * `src/test/isolation`) against the database at `url`, the way `isolationtester` (PostgreSQL 12 and
 * later) does, and returns its output, to compare with an expected `.out` file: one connection per
 * session plus a control connection (setup and teardown); `unused step name:` lines first (steps no
 * `permutation` line uses); for each permutation (the listed ones, or every interleaving of the
 * sessions' steps, generated one at a time) the setup blocks, the sessions' setups, the steps through
 * {@link Schedule} (blocked steps print `<waiting ...>` and later `<... completed>`, blocker
 * annotations `(*)`, `(other)`, `(other notices N)` honoured), then the teardowns. A session's
 * notices print as `<session>: NOTICE:  …` (the control connection's are hidden, as isolationtester
 * hides them), NOTIFY messages a session received after its step's results, a FATAL with libpq's
 * lines about the closed connection. Connections are named `isolation/<testName>/<session>` when
 * `testName` is given; `regressSettings` adds the startup settings of PostgreSQL's harness.
 *
 * A spec the isolation tester refuses is a {@link SpecSyntaxError} with its line; a spec without
 * `permutation` lines whose steps have more than `maxPermutations` interleavings a
 * {@link SpecTooManyPermutations} (before any connection); a failed setup or a step timeout a
 * {@link SpecRunError} with the output so far.
 *
 * @example
 * const run = await runIsolationSpec(url, readFileSync('skip-locked.spec', 'utf8'), { testName: 'skip-locked' });
 * if (run.isOk()) expect(run.value.output).toBe(readFileSync('skip-locked.out', 'utf8'));
 */
export async function runIsolationSpec(
  url: string,
  specText: string,
  options: RunIsolationSpecOptions = {},
): Promise<
  Result<IsolationSpecRun, SpecSyntaxError | SpecRunError | SpecTooManyPermutations | InvalidOptions>
> {
  const opts = parseOptions(runIsolationSpecOptionsSchema, options);
  if (opts.isErr()) return err(opts.error);
  const parsed = parseIsolationSpec(specText);
  if (parsed.isErr()) return err(parsed.error);
  return run(url, parsed.value, opts.value);
}

/** The startup options pg_regress's environment gives every connection (PGDATESTYLE, PGTZ, PGOPTIONS). */
const REGRESS_OPTIONS =
  '-c datestyle=Postgres,\\ MDY -c timezone=America/Los_Angeles -c intervalstyle=postgres_verbose';

async function run(
  url: string,
  spec: IsolationSpec,
  opts: z.output<typeof runIsolationSpecOptionsSchema>,
): Promise<Result<IsolationSpecRun, SpecRunError | SpecTooManyPermutations>> {
  // refused before any connection: isolationtester would try to run them all
  const count = specPermutationCount(spec);
  if (count > BigInt(opts.maxPermutations))
    return err(new SpecTooManyPermutations(count, opts.maxPermutations));
  let output = '';
  const emit = (text: string): void => {
    output += text;
    opts.onOutput?.(text);
  };
  const warnings: string[] = [];
  // internal session names: a spec's names may be any quoted identifier
  const internal = spec.sessions.map((_, i) => `session_${i + 1}`);
  const specName = new Map(internal.map((name, i) => [name, spec.sessions[i]?.name ?? name]));
  const sessionOfStep = new Map<string, { internal: string; sql: string }>();
  spec.sessions.forEach((session, i) => {
    for (const step of session.steps)
      sessionOfStep.set(step.name, { internal: internal[i] as string, sql: step.sql });
  });
  // isolationtester appends `/<session>` to the application_name pg_isolation_regress gives the test
  const appName = (session: string) =>
    opts.testName === undefined ? `pg-txkit-isolation/${session}` : `isolation/${opts.testName}/${session}`;
  const connectionOptions = opts.regressSettings ? { options: REGRESS_OPTIONS } : {};

  const control = new pg.Client({
    connectionString: url,
    application_name: appName('control connection'),
    types: textTypes,
    ...connectionOptions,
  });
  control.on('error', () => {});
  let schedule: Schedule | undefined;
  let current = -1;
  let ran = 0;
  try {
    // check_testspec's warnings come before anything else (stderr, merged into the .out by the harness)
    for (const name of unusedSteps(spec)) emit(`unused step name: ${name}\n`);
    await control.connect();
    // the isolationtester (and libpq) of the server's major prints what its expected files hold
    const versionNum = Number(
      (await control.query<{ v: string }>('SELECT current_setting($1) AS v', ['server_version_num'])).rows[0]
        ?.v,
    );
    const repeatFatal = versionNum >= 140000 && versionNum < 150000;
    schedule = await Schedule.open(url, {
      sessions: internal,
      values: 'text',
      blockers: 'sessions',
      stepTimeoutMs: opts.stepTimeoutMs,
      blockTimeoutMs: opts.blockTimeoutMs,
      applicationName: 'pg-txkit-isolation',
      ...(opts.regressSettings ? { connectionOptions: REGRESS_OPTIONS } : {}),
    });
    const s = schedule;
    await s.run(
      internal.map(
        (session) =>
          [
            session,
            "SELECT set_config('application_name', $1, false)",
            [appName(specName.get(session) ?? session)],
          ] as const,
      ),
    );
    const senders = new Map(internal.map((session) => [s.pid(session), specName.get(session) ?? session]));
    emit(`Parsed test spec with ${spec.sessions.length} session${spec.sessions.length === 1 ? '' : 's'}\n`);

    for (const permutation of eachSpecPermutation(spec)) {
      current = ran++;
      const p = current;
      emit(`\nstarting permutation: ${permutation.map((ps) => ps.step).join(' ')}\n`);
      for (const sql of spec.setup) {
        try {
          emit(printResult(await execText(control, sql)));
        } catch (error) {
          return err(new SpecRunError(`setup failed: ${messageOf(error)}`, output, p, error));
        }
      }
      for (const [i, session] of spec.sessions.entries()) {
        if (session.setup === undefined) continue;
        const [outcome] = await s.run([[internal[i] as string, session.setup]]);
        if (outcome) emit(printNotices(outcome, specName));
        if (outcome?.status === 'error') {
          return err(
            new SpecRunError(`setup of session ${session.name} failed: ${outcome.message ?? ''}`, output, p),
          );
        }
        emit(printResult(outcome?.results[outcome.results.length - 1]));
      }

      const steps: ScheduleStepSpec[] = permutation.map((ps) => {
        const step = sessionOfStep.get(ps.step);
        if (!step) throw new Error(`internal: step ${ps.step} was checked by the parser`);
        return { session: step.internal, sql: step.sql, name: ps.step, blockers: blockersOf(ps) };
      });
      emit(printSteps(await s.run(steps), specName, senders, repeatFatal));

      for (const [i, session] of spec.sessions.entries()) {
        if (session.teardown === undefined) continue;
        const [outcome] = await s.run([[internal[i] as string, session.teardown]]);
        if (outcome) emit(printNotices(outcome, specName));
        if (outcome?.status === 'error') {
          warnings.push(`teardown of session ${session.name} failed: ${outcome.message ?? ''}`);
        } else emit(printResult(outcome?.results[outcome.results.length - 1]));
      }
      if (spec.teardown !== undefined) {
        try {
          emit(printResult(await execText(control, spec.teardown)));
        } catch (error) {
          warnings.push(`teardown failed: ${messageOf(error)}`);
        }
      }
    }
    return ok({ output, permutations: ran, warnings });
  } catch (error) {
    if (error instanceof Error && error.name === 'ScheduleError') {
      return err(new SpecRunError(error.message, output, current, error));
    }
    if (current < 0)
      return err(new SpecRunError(`cannot connect: ${messageOf(error)}`, output, current, error));
    throw error;
  } finally {
    await schedule?.close();
    await control.end().catch(() => {});
  }
}
