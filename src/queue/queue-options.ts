import { z } from 'zod/v4';
import { loggerSchema } from '../observability/logger.js';
import { telemetrySchema } from '../observability/otel-api.js';
import { durationSchema, spanSchema } from '../tx/duration.js';
import { isPayloadSchema, type PayloadSchema } from './payload-schema.js';
import { REAP_BATCHES } from './store/job-store.js';
import { isJobId } from './store/split-leases.js';

/**
 * A duration: the transaction module's schema (ms as a number, or '500ms', '2s', '5m', '1h'), bounded to
 * 2147483647 ms. Bounded because a larger value broke things silently (found by
 * test/property/fuzz-queue): `pollInterval: 1e12` overflowed setTimeout, which then fires after 1 ms
 * (a hot polling loop), and a lease that large made the claim fail with "interval out of range" (22008).
 */
export { durationSchema };

/**
 * Text PostgreSQL can store: `text` cannot hold NUL (U+0000); a task name or key with one failed the
 * INSERT with 22021 instead of being refused (found by test/property/fuzz-queue).
 */
const storable = (s: string): boolean => !s.includes('\u0000');
const NO_NUL = 'must not contain NUL (U+0000): PostgreSQL text cannot store it';
/** A task name as stored in the jobs table. */
const taskName = z.string().min(1).refine(storable, NO_NUL);

/**
 * The shortest lease a claim may take: 5 s. A worker's heartbeat extends a lease once it is a third old
 * (checked every sixth of the lease), so a lease must outlast a claim's round trip, the wait for the next
 * heartbeat and an extension's round trip, on a busy event loop and a slow network. A lease of 0 ms was
 * once accepted: the job expired the moment it was claimed, the reaper gave it back and another worker
 * ran it while the first run went on (one job ran 3 times, 2 at once). Below 5 s a pause of the process
 * (a garbage collection, a CPU-starved container) of a second or two is enough to run a job twice.
 */
export const MIN_LEASE_MS = 5000;

/** A lease: a duration of at least {@link MIN_LEASE_MS} (5 s). */
export const leaseSchema = durationSchema.refine(
  (ms) => ms >= MIN_LEASE_MS,
  'at least 5 s: a shorter lease can expire while its job runs, and the job runs twice',
);

/**
 * How long a schedule declaration stays live without a refresh: at least 3 s. Workers refresh theirs
 * every third of it, so a shorter one turns a pause of a replica (a garbage collection, a slow pass, a
 * pool client waited for) into its schedules being disabled, or another deploy's definition taking over.
 */
export const livenessSchema = durationSchema.pipe(
  z.number().min(3000, 'at least 3 s: workers refresh their declarations every third of it'),
);

/** A capability a task requires and a worker declares ('publish-token'). */
export const capabilityName = z.string().min(1).max(200).refine(storable, NO_NUL);

/** A duration as accepted by the queue's options. */
export type Duration = z.input<typeof durationSchema>;

/** Exponential backoff with full jitter: delay = random(0, min(capMs, baseMs * 2^(attempt-1))). */
export const backoffSchema = z.strictObject({
  baseMs: z.number().int().min(0).max(2_147_483_647).default(1000),
  capMs: z.number().int().min(0).max(2_147_483_647).default(3_600_000),
});

/** A group key as stored in the jobs table (text without NUL, 1 to 1000 characters). */
/** A group's key (see the queue's `groups`): non-empty text, without NUL. */
export const groupKey = z.string().min(1).max(1000).refine(storable, NO_NUL);

/**
 * The default guard of a rate (ms): the window a claim checks is `per + guard`, so that handler STARTS,
 * not only claims, hold `limit` in any interval of `per` (what a mail provider's quota counts).
 *
 * A handler starts when its claim's answer reaches its process: after the claim's commit, the round
 * trip and the event loop, a delay that differs from claim to claim and from process to process. With
 * windows exactly `per` long a saturated rate packs its claims to the millisecond, so a delay a few ms
 * shorter for a later claim than for an earlier one put two windows' starts into one real `per`: on
 * PostgreSQL 18.4, two worker processes of a task limited to 10 per second (test/integration/
 * queue-rates-real-time.test.ts, counted in full seconds) had 12 to 18 starts of the task in one
 * second in each of five runs (up to 8 of a group limited to 4), and in one run 12 claims of the task
 * and 7 of the group as the jobs table's trigger saw them (a claim leases its rows over a few ms after
 * it stamps its window). The delay from a claim to its handler's start, measured in those runs and ten
 * more with the guard, on the shared 2-core machine (load 1 to 20): median 0.4-12 ms, p95 4.5-73 ms,
 * largest 6.5-45.5 ms up to load 10, 73 ms once at load 13. 100 ms covers all of it: with it, each of
 * the ten runs had at most 10 starts and 10 claims of the task, 4 and 4 of the group, in any second.
 *
 * The cost is throughput: a saturated rate runs at `limit / (per + guard)`, 9.1 % under `limit / per`
 * for a period of 1 s, 0.17 % for 1 min; a shorter period wants a smaller guard (`guard: '20ms'`), a
 * worker far from its database (a WAN round trip that varies) a larger one. Pacing each start to its
 * claim's stamp plus a fixed delay instead would remove the spread below that delay, but needs the
 * server's clock mapped into each worker's (error up to half a round trip), delays every rated start,
 * and still needs a guard for the answers that come later than the delay: a guard is needed either way,
 * and this one covers what was measured. Giving back, unstarted, each job whose claim's answer came
 * later than the guard after the claim was sent would make the promise unconditional (such a start
 * falls within the guard after its stamp), but a worker whose round trips always take longer (far from
 * its database, or overloaded) would then start nothing and keep using up the windows: the guard is a
 * tolerance, not a gate.
 */
export const RATE_GUARD_MS = 100;

/**
 * A rate limit: at most `limit` claims in any interval of length `per + guard` (a sliding window,
 * counted at claim; a retried job counts again), so at most `limit` handler starts in any interval of
 * `per` (see {@link RATE_GUARD_MS}). Jobs over the rate wait, pending.
 */
export const rateSchema = z.strictObject({
  /** Claims allowed per window (at most 10,000: the window's claim times are kept in the database). */
  limit: z.number().int().min(1).max(10_000),
  /** The window's length (a duration, at least 1 ms). */
  per: durationSchema.refine((ms) => ms >= 1, 'at least 1 ms'),
  /**
   * How much longer than `per` the window the claim checks is (default {@link RATE_GUARD_MS}, 100 ms;
   * 0: claims only): handler starts then hold `limit` in any interval of `per` while their delays after
   * their claims differ by less than the guard. Costs `guard / (per + guard)` of the rate's throughput.
   */
  guard: durationSchema.default(RATE_GUARD_MS),
});

/** The limits of a group: how many of its jobs may run at once, and how many may start per window. */
export const groupLimitsSchema = z
  .strictObject({
    /** At most this many jobs of the group running (leased) at once, across every worker. 1: serial. */
    concurrency: z.number().int().min(1).max(1_000_000).optional(),
    /** At most `limit` of the group's jobs claimed in any interval of `per + guard`, started in any `per`. */
    rate: rateSchema.optional(),
  })
  .refine((l) => l.concurrency !== undefined || l.rate !== undefined, 'give concurrency, rate or both');

/**
 * The queue's schema: a lower-case identifier, and a schema of the queue's own. `public` (where the
 * application's tables are; the queue's migrations would create their tables and functions among them),
 * `information_schema` and PostgreSQL's reserved `pg_*` schemas (pg_catalog, pg_toast, pg_temp…) were
 * accepted: the queue's tables were created there, or the migration failed half-way.
 */
const schemaName = z
  .string()
  .regex(/^[a-z_][a-z0-9_]{0,40}$/, 'a lower-case identifier of at most 41 characters (letters, digits, _)')
  .refine(
    (name) => name !== 'public' && name !== 'information_schema' && !name.startsWith('pg_'),
    "a schema of its own for the queue's tables: not public, information_schema or a pg_ schema",
  );

/** Options of `new Queue(...)` (validated; the type comes from this schema). */
export const queueOptionsSchema = z.strictObject({
  /** The pool the queue runs its statements on (claims, settles, reaper, LISTEN connection). */
  pool: z.custom<import('pg').Pool>(
    (v) => typeof v === 'object' && v !== null && 'connect' in v && 'query' in v,
    'a pg.Pool',
  ),
  /** The TxManager that runs handler transactions (`ctx.transaction`) together with the completion. */
  txManager: z.custom<{ do: unknown }>(
    (v) => typeof v === 'object' && v !== null && 'do' in v,
    'a TxManager',
  ),
  /** Schema holding the queue's tables. */
  schema: schemaName.default('pgtxkit_queue'),
  /** Task name → schema of its payload: zod (the user's copy) or any Standard Schema (valibot, arktype…). */
  tasks: z.record(
    taskName,
    z.custom<PayloadSchema>(isPayloadSchema, 'a zod schema or another Standard Schema'),
  ),
  /** Move completed and cancelled jobs to `jobs_archive` instead of deleting them. */
  archive: z.boolean().default(false),
  /** Default attempts per job (the first run counts). */
  maxAttempts: z.number().int().min(1).max(1_000_000).default(5),
  /** Default retry backoff. */
  backoff: backoffSchema.default({ baseMs: 1000, capMs: 3_600_000 }),
  /** Default lease of a claim (at least 5 s). */
  lease: leaseSchema.default(30_000),
  /** Recurring schedules: name → definition (validated by `declareSchedules` in the constructor). */
  schedules: z.record(z.string(), z.unknown()).optional(),
  /**
   * Task name → what a worker must have to claim its jobs: capability names the worker declares in
   * `work(…, { capabilities })`. A worker lacking one does not claim the task (and reports it).
   */
  requires: z.record(taskName, z.array(capabilityName).max(100)).default({}),
  /**
   * Limits per job group (the `group` given at enqueue), enforced in the database by every worker's
   * claim: `default` applies to every group not named here. A group with no limit (none named, no
   * default) is unlimited.
   */
  groups: z.record(groupKey, groupLimitsSchema).optional(),
  /** Rate limits per task (across all its jobs, grouped or not). */
  taskRates: z.record(taskName, rateSchema).optional(),
  /** A pino-compatible logger for the workers (without one: errors to console.error, rate-limited). */
  logger: loggerSchema.optional(),
  /** OpenTelemetry: the `@opentelemetry/api` module, `false` for none; by default the installed one is found. */
  telemetry: telemetrySchema.optional(),
});

/**
 * The earliest instant PostgreSQL's timestamptz stores (4714-11-24 00:00 UTC BC, Julian day 0). An
 * earlier runAt reached the server and failed with 22008; the latest JavaScript Date (year 275760) is
 * within its range (294276 AD).
 */
const EARLIEST_TIMESTAMP = new Date(Date.UTC(-4713, 10, 24));

/** Options of `enqueue`. */
export const enqueueOptionsSchema = z.strictObject({
  /** Earliest time the job may run (default now). */
  runAt: z
    .date({
      // zod's own text for an Invalid Date was "expected date, received Date".
      error: (issue) => (issue.input instanceof Date ? 'invalid date (its time is NaN)' : 'expected a Date'),
    })
    .min(EARLIEST_TIMESTAMP, 'before the earliest timestamp PostgreSQL stores (4714-11-24 BC)')
    .optional(),
  /** Lower runs first (default 0). */
  priority: z.number().int().min(-2_147_483_648).max(2_147_483_647).default(0),
  /** Unique key among live (pending or running) jobs of the task; a duplicate returns the existing job. */
  key: z.string().min(1).max(1000).refine(storable, NO_NUL).optional(),
  /** Attempts before the job is dead (default: the queue's). */
  maxAttempts: z.number().int().min(1).max(1_000_000).optional(),
  /** Retry backoff (default: the queue's). */
  backoff: backoffSchema.optional(),
  /** The job's group: the key its concurrency and rate limits are counted by (see the queue's `groups`). */
  group: groupKey.optional(),
});

/**
 * Options of `enqueueMany`: as `enqueue`, with `keys` aligned with the payloads instead of `key`, and
 * `group` for every job or `groups` aligned with the payloads.
 */
export const enqueueManyOptionsSchema = enqueueOptionsSchema
  .omit({ key: true })
  .extend({
    /** One unique key per payload (same order); null for a payload without a key. */
    keys: z.array(z.string().min(1).max(1000).refine(storable, NO_NUL).nullable()).optional(),
    /** One group per payload (same order); null for a payload without a group. */
    groups: z.array(groupKey.nullable()).optional(),
  })
  .refine((o) => o.group === undefined || o.groups === undefined, {
    message: 'give group (one for all) or groups (one per payload), not both',
    path: ['groups'],
  });

/** Options of `claim`. */
export const claimOptionsSchema = z.strictObject({
  /** How many jobs to claim at most. */
  batch: z.number().int().min(1).max(10_000).default(1),
  /** Lease per job (default: the queue's; at least 5 s). */
  lease: leaseSchema.optional(),
  /** Only these tasks (default: every task registered with the queue). */
  tasks: z.array(taskName).min(1).optional(),
});

/** Options of `fail`. */
export const failOptionsSchema = z.strictObject({
  /** Retry after exactly this long instead of the job's backoff. */
  retryIn: durationSchema.optional(),
  /** Make the job dead now, whatever attempts remain. */
  final: z.boolean().default(false),
});

/**
 * A job id: a whole number from 0 to the largest bigint, as a string of digits or a number. One check
 * with one message: a union of string and number schemas followed by a range check reported two issues
 * for 'abc', the second one wrong ("beyond bigint").
 */
const jobIdSchema = z.custom<string | number>(
  (v) => (typeof v === 'string' || (typeof v === 'number' && Number.isSafeInteger(v))) && isJobId(v),
  'not a job id (a whole number from 0 to 9223372036854775807)',
);

/** Options of `redrive`. */
export const redriveOptionsSchema = z.strictObject({
  /** Only dead jobs of this task. */
  task: taskName.optional(),
  /** Only these job ids. */
  ids: z.array(jobIdSchema).optional(),
  /** At most this many jobs (default 1000). */
  limit: z.number().int().min(1).max(1_000_000).default(1000),
});

/** Options of `reap`. */
export const reapOptionsSchema = z.strictObject({
  /** Jobs per statement (SKIP LOCKED batch). */
  batch: z.number().int().min(1).max(10_000).default(REAP_BATCHES.batch),
  /** Stop after this many batches. */
  maxBatches: z.number().int().min(1).max(10_000).default(REAP_BATCHES.maxBatches),
});

/** Longest retention prune accepts: 100 years (an older cutoff is before any job, and out of range). */
const MAX_RETENTION_MS = 100 * 365 * 86_400_000;
/** A retention: a time span of at least 1 ms and at most 100 years ('7d', '12h', …). */
const retentionSchema = spanSchema.refine((ms) => ms <= MAX_RETENTION_MS, 'at most 100 years');

/** The fields of `prune`'s options (see {@link pruneOptionsSchema}). */
export const pruneFieldsSchema = z.strictObject({
  /** Delete archived (done, cancelled) jobs finished longer ago than this. */
  olderThan: retentionSchema.optional(),
  /** Delete dead jobs that died longer ago than this (kept unless given). */
  deadOlderThan: retentionSchema.optional(),
  /** Rows per statement (each batch is its own short autocommit statement). */
  batch: z.number().int().min(1).max(10_000).default(1000),
  /** At most this many rows per call, in all (the rest waits for the next call). */
  limit: z.number().int().min(1).max(100_000_000).default(100_000),
});

/** Refuses prune options that would delete nothing: at least one of `olderThan` and `deadOlderThan`. */
export const SOME_RETENTION = [
  (o: { olderThan?: number | undefined; deadOlderThan?: number | undefined }) =>
    o.olderThan !== undefined || o.deadOlderThan !== undefined,
  { message: 'give olderThan (archived jobs) or deadOlderThan (dead jobs), or both' },
] as const;

/** Options of `prune`: at least one of `olderThan` and `deadOlderThan`. */
export const pruneOptionsSchema = pruneFieldsSchema.refine(...SOME_RETENTION);

/** Parses `input` with `schema`, mapping zod's issues to `InvalidOptions` (the shared helper). */
export { parseOptions } from '../errors/parse-options.js';

/** Options of `queue.metrics()`. */
export const metricsOptionsSchema = z.strictObject({
  /** Each count by state reads at most this many index entries: exact below it, a lower bound at it. */
  cap: z.number().int().min(1).max(10_000_000).default(10_000),
});
