import { err, ok, type Result } from 'neverthrow';
import pg from 'pg';
import { z } from 'zod/v4';
import type { InvalidOptions } from '../errors/index.js';
import { parseOptions } from '../errors/parse-options.js';
import { formatResultSet } from './format-result-set.js';
import {
  type IsolationSpec,
  parseIsolationSpec,
  type SpecPermutationStep,
  type SpecSyntaxError,
  specPermutations,
} from './isolation-spec.js';
import {
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

/** The step's results and error, as isolationtester prints them after the step line. */
function printOutcome(outcome: StepOutcome): string {
  if (outcome.status === 'ok') return outcome.results.map((r) => printResult(r)).join('');
  const text = outcome.severity ? `${outcome.severity}:  ${outcome.message ?? ''}` : (outcome.message ?? '');
  return `${text}\n`;
}

function blockersOf(pstep: SpecPermutationStep): StepBlocker[] {
  return pstep.blockers.map((b) =>
    b.kind === 'once' ? '*' : b.kind === 'step' ? b.step : { step: b.step, notices: b.notices },
  );
}

/** Renders one permutation's outcomes in the order isolationtester prints them. */
function printSteps(outcomes: readonly StepOutcome[], sessionNames: ReadonlyMap<string, string>): string {
  let out = '';
  const notices = (o: StepOutcome): string =>
    o.notices.map((n) => `${sessionNames.get(o.session) ?? o.session}: ${n}\n`).join('');
  const completed = (after: number): StepOutcome[] =>
    outcomes
      .filter((o) => o.blocked && o.completedAfter === after)
      .sort((a, b) => a.completionOrder - b.completionOrder);
  outcomes.forEach((o, i) => {
    const name = o.name ?? String(i);
    if (o.blocked) out += `step ${name}: ${o.sql} <waiting ...>\n`;
    else out += `${notices(o)}step ${name}: ${o.sql}\n${printOutcome(o)}`;
    for (const c of completed(i))
      out += `${notices(c)}step ${c.name ?? ''}: <... completed>\n${printOutcome(c)}`;
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
 * `src/test/isolation`) against the database at `url`, the way `isolationtester` does, and returns
 * its output, to compare with an expected `.out` file: one connection per session plus a control
 * connection (setup and teardown), every connection with `client_min_messages = warning`; for each
 * permutation (the listed ones, or every interleaving of the sessions' steps) the setup blocks, the
 * sessions' setups, the steps through {@link Schedule} (blocked steps print `<waiting ...>` and later
 * `<... completed>`, blocker annotations `(*)`, `(other)`, `(other notices N)` honoured), then the
 * teardowns. A spec the isolation tester refuses is a {@link SpecSyntaxError} with its line; a failed
 * setup or a step timeout a {@link SpecRunError} with the output so far.
 *
 * @example
 * const run = await runIsolationSpec(url, readFileSync('skip-locked.spec', 'utf8'));
 * if (run.isOk()) expect(run.value.output).toBe(readFileSync('skip-locked.out', 'utf8'));
 */
export async function runIsolationSpec(
  url: string,
  specText: string,
  options: RunIsolationSpecOptions = {},
): Promise<Result<IsolationSpecRun, SpecSyntaxError | SpecRunError | InvalidOptions>> {
  const opts = parseOptions(runIsolationSpecOptionsSchema, options);
  if (opts.isErr()) return err(opts.error);
  const parsed = parseIsolationSpec(specText);
  if (parsed.isErr()) return err(parsed.error);
  return run(url, parsed.value, opts.value);
}

async function run(
  url: string,
  spec: IsolationSpec,
  opts: z.output<typeof runIsolationSpecOptionsSchema>,
): Promise<Result<IsolationSpecRun, SpecRunError>> {
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
  const permutations = specPermutations(spec);

  const control = new pg.Client({
    connectionString: url,
    application_name: 'pg-txkit-isolation:control',
    types: textTypes,
  });
  control.on('error', () => {});
  let schedule: Schedule | undefined;
  let current = -1;
  try {
    await control.connect();
    await control.query('SET client_min_messages = warning');
    schedule = await Schedule.open(url, {
      sessions: internal,
      values: 'text',
      blockers: 'sessions',
      stepTimeoutMs: opts.stepTimeoutMs,
      blockTimeoutMs: opts.blockTimeoutMs,
      applicationName: 'pg-txkit-isolation',
    });
    const s = schedule;
    await s.run(internal.map((session) => [session, 'SET client_min_messages = warning'] as const));
    emit(`Parsed test spec with ${spec.sessions.length} session${spec.sessions.length === 1 ? '' : 's'}\n`);

    for (const [p, permutation] of permutations.entries()) {
      current = p;
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
      emit(printSteps(await s.run(steps), specName));

      for (const [i, session] of spec.sessions.entries()) {
        if (session.teardown === undefined) continue;
        const [outcome] = await s.run([[internal[i] as string, session.teardown]]);
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
    return ok({ output, permutations: permutations.length, warnings });
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
