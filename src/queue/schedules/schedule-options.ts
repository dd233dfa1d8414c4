import { createHash } from 'node:crypto';
import { Cron } from 'croner';
import { err, ok, type Result } from 'neverthrow';
import { z } from 'zod/v4';
import { InvalidOptions, type OptionIssue } from '../../errors/errors.js';
import { type PayloadSchema, validatePayload } from '../payload-schema.js';
import { durationSchema, groupKey, parseOptions } from '../queue-options.js';
import { type DeclaredSchedule, missedPolicySchema, type StoredSchedule } from './schedule-types.js';

/** A schedule name: part of its jobs' keys (`schedule:<name>:<tick>`), so no ':' and no NUL. */
export const scheduleNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,100}$/, 'letters, digits, _ . - (at most 100)');

/** Whether `tz` is an IANA time zone this runtime knows ('Europe/Paris', 'UTC'). */
function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** The cron expression's parse error, or undefined when croner accepts it. */
function cronProblem(expression: string, timezone: string): string | undefined {
  try {
    const cron = new Cron(expression, { timezone, paused: true });
    if (cron.nextRun(new Date(0)) === null) return 'the expression never matches';
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/**
 * Why a valid cron is refused as a definition: it has no tick after now (croner accepts a 7th, year,
 * field: '0 0 0 1 1 * 2020' was accepted, and such a schedule would never fire).
 */
function cronEnded(expression: string, timezone: string): string | undefined {
  const now = new Date();
  if (new Cron(expression, { timezone, paused: true }).nextRun(now) !== null) return undefined;
  return `never fires again: no tick after ${now.toISOString()} (its year field is in the past)`;
}

/**
 * One schedule as declared in code (`new Queue({ schedules: { name: definition } })`): a cron
 * expression in a time zone or a fixed interval, the task it enqueues and what to do about missed ticks.
 */
export const scheduleDefinitionSchema = z
  .strictObject({
    /** The task each tick enqueues (one of the queue's tasks). */
    task: z.string().min(1),
    /** The payload of every job (validated by the task's schema when the queue is built). Default `{}`. */
    payload: z.unknown().optional(),
    /**
     * A cron expression (5 fields, or 6 with seconds first), evaluated by croner in `tz`. A wall-clock
     * time that does not exist (spring forward) runs at the next existing time; one that happens twice
     * (fall back) runs once, the first time.
     */
    cron: z.string().min(1).max(200).optional(),
    /** The cron's IANA time zone (default 'UTC'). */
    tz: z.string().min(1).max(100).refine(isTimeZone, 'not an IANA time zone').optional(),
    /** A fixed interval instead of a cron: ticks at every multiple of it since 1970-01-01 UTC (≥ 1 s). */
    every: durationSchema.pipe(z.number().min(1000, 'at least 1 s')).optional(),
    /** Missed ticks (older than `grace` when a replica gets to them): 'skip' (default), 'once', { catchUp: N }. */
    missed: missedPolicySchema.default('skip'),
    /** How late a tick may fire and still count as on time (default 1 minute). */
    grace: durationSchema.default(60_000),
    /** The jobs' priority (lower runs first; default 0). */
    priority: z.number().int().min(-2_147_483_648).max(2_147_483_647).default(0),
    /** The jobs' attempts (default: the queue's). */
    maxAttempts: z.number().int().min(1).max(1_000_000).optional(),
    /** The jobs' group: each tick's job counts against that group's limits (the queue's `groups`). */
    group: groupKey.optional(),
  })
  .superRefine((d, ctx) => {
    if ((d.cron === undefined) === (d.every === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['cron'], message: 'give exactly one of cron or every' });
      return;
    }
    if (d.tz !== undefined && d.cron === undefined) {
      ctx.addIssue({ code: 'custom', path: ['tz'], message: 'tz applies to cron only' });
    }
    if (d.cron !== undefined) {
      const problem = cronProblem(d.cron, d.tz ?? 'UTC') ?? cronEnded(d.cron, d.tz ?? 'UTC');
      if (problem !== undefined) ctx.addIssue({ code: 'custom', path: ['cron'], message: problem });
    }
  });

/**
 * A schedule as declared in code (durations may be strings): exactly one of `cron` (with `tz`) or
 * `every`, the `task` it enqueues with `payload`, and the `missed` policy.
 *
 * @example
 * const daily: ScheduleDefinition = { cron: '0 6 * * *', tz: 'Europe/Paris', task: 'generate-post', missed: 'once' };
 */
export type ScheduleDefinition<K extends string = string> = Omit<
  z.input<typeof scheduleDefinitionSchema>,
  'task'
> & { readonly task: K };

/** The normalized, storable form of a parsed definition (every field present, in a fixed order). */
export function storedSchedule(
  d: z.output<typeof scheduleDefinitionSchema>,
  payload: unknown,
): StoredSchedule {
  return {
    task: d.task,
    payload: payload ?? {},
    cron: d.cron ?? null,
    tz: d.tz ?? 'UTC',
    every: d.every ?? null,
    missed: d.missed,
    grace: d.grace,
    priority: d.priority,
    maxAttempts: d.maxAttempts ?? null,
    // Only when given: a definition without a group keeps the hash it had before groups were stored.
    ...(d.group === undefined ? {} : { group: d.group }),
  };
}

/** JSON with object keys sorted, so equal definitions give equal text whatever their key order. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** The definition's identity: sha-256 of its canonical JSON (hex). Two deploys of the same definition agree. */
export function scheduleHash(s: StoredSchedule): string {
  return createHash('sha256').update(canonicalJson(s), 'utf8').digest('hex');
}

/**
 * Reads a definition back from the database (another replica's, maybe another version's). Undefined when
 * it is not one this version understands (then the row is left alone and the error reported).
 */
export function parseStoredSchedule(json: unknown): StoredSchedule | undefined {
  const r = storedScheduleSchema.safeParse(json);
  if (!r.success) return undefined;
  if (r.data.cron !== null && cronProblem(r.data.cron, r.data.tz) !== undefined) return undefined;
  if ((r.data.cron === null) === (r.data.every === null)) return undefined;
  const { group, ...rest } = r.data;
  return { ...rest, payload: rest.payload ?? {}, ...(group === undefined ? {} : { group }) };
}

const storedScheduleSchema = z.object({
  task: z.string().min(1),
  payload: z.unknown(),
  cron: z.string().nullable(),
  tz: z.string().refine(isTimeZone),
  every: z.number().int().min(1000).nullable(),
  missed: missedPolicySchema,
  grace: z.number().int().min(0),
  priority: z.number().int(),
  maxAttempts: z.number().int().min(1).nullable(),
  group: z.string().min(1).optional(),
});

/**
 * Validates the schedules declared on a queue (names, definitions, cron expressions and time zones, task
 * names, payloads by their task's schema) and computes each definition's hash. Every problem at once, as
 * one InvalidOptions with paths under `schedules`; nothing is sent to the database.
 *
 * @example
 * const declared = declareSchedules({ nightly: { cron: '0 3 * * *', task: 'report' } }, { report: z.object({}) });
 */
export function declareSchedules(
  input: Readonly<Record<string, ScheduleDefinition>> | undefined,
  tasks: Readonly<Record<string, PayloadSchema>>,
): Result<DeclaredSchedule[], InvalidOptions> {
  const declared: DeclaredSchedule[] = [];
  const issues: OptionIssue[] = [];
  for (const [name, definition] of Object.entries(input ?? {})) {
    const at = (e: InvalidOptions) => {
      for (const i of e.issues) issues.push({ ...i, path: ['schedules', name, ...i.path] });
    };
    const named = parseOptions(scheduleNameSchema, name);
    if (named.isErr()) at(named.error);
    const parsed = parseOptions(scheduleDefinitionSchema, definition);
    if (parsed.isErr()) {
      at(parsed.error);
      continue;
    }
    const d = parsed.value;
    const schema = Object.hasOwn(tasks, d.task) ? tasks[d.task] : undefined;
    if (schema === undefined) {
      issues.push({
        path: ['schedules', name, 'task'],
        message: `'${d.task}' is not one of the queue's tasks`,
      });
      continue;
    }
    const payload = validatePayload(schema, d.payload ?? {});
    if (payload.isErr()) {
      for (const i of payload.error.issues)
        issues.push({ ...i, path: ['schedules', name, 'payload', ...i.path] });
      continue;
    }
    const stored = storedSchedule(d, payload.value);
    let hash: string;
    try {
      hash = scheduleHash(stored); // JSON of the payload: a BigInt or a cycle throws here, not at a tick
    } catch (error) {
      issues.push({
        path: ['schedules', name, 'payload'],
        message: `not JSON-serializable (${String(error)})`,
      });
      continue;
    }
    if (named.isOk()) declared.push({ name, hash, definition: stored });
  }
  return issues.length > 0 ? err(new InvalidOptions(issues)) : ok(declared);
}
