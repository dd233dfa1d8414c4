/** Where a job is in its life. Done and cancelled jobs leave the jobs table (see `archive`). */
export type JobState = 'pending' | 'running' | 'dead';

/**
 * A claimed job: what `claim()` returns and what a handler receives. `leaseToken` fences every
 * settle: `complete`/`fail`/`extend` change the row only while the job is still running under this
 * token, so a worker whose lease expired (and whose job was re-queued or re-claimed) gets `LeaseLost`.
 *
 * @example
 * const jobs = await queue.claim({ batch: 10, lease: '30s' });
 * if (jobs.isOk()) for (const job of jobs.value) console.log(job.id, job.task, job.attempts);
 */
export interface Job<P = unknown> {
  /** Job id (a bigint, as a decimal string). */
  readonly id: string;
  /** Task name. */
  readonly task: string;
  /**
   * The payload, as validated by the task's schema when it was enqueued (a job enqueued from SQL: when
   * it is claimed — before its handler runs, or before `claim()` returns it).
   */
  readonly payload: P;
  /** Lower runs first. */
  readonly priority: number;
  /** When the job became (or becomes) runnable. */
  readonly runAt: Date;
  /** Attempts so far, counting this one (attempts are counted at claim). */
  readonly attempts: number;
  /** After this many attempts a failure makes the job dead. */
  readonly maxAttempts: number;
  /** Unique key, if it was enqueued with one. */
  readonly key: string | null;
  /** The error of the previous attempt, if any. */
  readonly lastError: string | null;
  /** This claim's lease token (a fresh uuid per claim). */
  readonly leaseToken: string;
  /** When this claim's lease expires unless extended. */
  readonly leaseExpiresAt: Date;
  /** When it was enqueued. */
  readonly createdAt: Date;
  /**
   * The last progress stored by `ctx.progress` (null when none). Kept across retries: a new attempt
   * sees where the previous one got to and can resume from there.
   */
  readonly progress: unknown;
  /** Its group (the key its concurrency and rate limits count by), if it was enqueued with one. */
  readonly group: string | null;
  /**
   * The trace context (W3C `traceparent`, `tracestate`) of the span that enqueued it, when
   * OpenTelemetry was recording; its processing spans link to it. null otherwise.
   */
  readonly traceContext: Readonly<Record<string, string>> | null;
}

/** The part of a job that settles it: id and lease token. */
export type JobLease = Pick<Job, 'id' | 'leaseToken'>;

/**
 * The part of a claimed job that completes it through `completeClaimed`: id, lease token and group. A
 * batch of jobs that all have `group: null` is completed by a statement without the group steps.
 */
export type ClaimedLease = Pick<Job, 'id' | 'leaseToken' | 'group'>;

/** What `enqueue` returns: the job it created, or the live job that already had the key. */
export interface EnqueuedJob {
  /** Job id. */
  readonly id: string;
  /** Task name. */
  readonly task: string;
  /** Its state now ('pending', or 'running' for an existing keyed job). */
  readonly state: JobState;
  /** When it runs. */
  readonly runAt: Date;
  /** Its unique key, if any. */
  readonly key: string | null;
  /** Its group, if any. */
  readonly group: string | null;
  /** false when a live job with the same key already existed and was returned instead. */
  readonly created: boolean;
}

/**
 * What a claim returns: ONE row for the whole batch (`rowMode: 'array'`, every value as the server's
 * text, {@link RAW_TEXT}), so the driver decodes four strings per claim, not a row of strings per job.
 * - `heads`: each job's numbers and lease token joined by commas (id, priority, runAt ms, attempts,
 *   maxAttempts, leaseToken, leaseExpiresAt ms, createdAt ms; whole epoch milliseconds), the jobs joined
 *   by semicolons (neither can occur in a field);
 * - `tasks`, `payloads`: JSON arrays of the task names and the payloads, in the same order;
 * - `extras`: a JSON array holding, per job, null or [key, lastError, progress, group, traceContext,
 *   unchecked] (the fields that are usually NULL; `unchecked`: enqueued from SQL, payload not validated).
 * All four are NULL when nothing was claimed. The limited claim adds `waitMs`: when the soonest full rate
 * window that stopped it frees a place, or NULL.
 */
export type ClaimedRow = [
  heads: string | null,
  tasks: string | null,
  payloads: string | null,
  extras: string | null,
];

/** The row of the limited claim: {@link ClaimedRow} then wait_ms. */
export type LimitedClaimedRow = [...ClaimedRow, waitMs: string | null];

/** A job's usually-NULL fields, as the claim's `extras` holds them. */
type Extras = [
  key: string | null,
  lastError: string | null,
  progress: unknown,
  group: string | null,
  traceContext: Readonly<Record<string, string>> | null,
  /** True for a job enqueued from SQL: its payload was not validated by the task's schema yet. */
  unchecked?: boolean,
];

/**
 * The claimed jobs whose payload was not validated when they were enqueued (enqueued from SQL, with the
 * schema's `enqueue` function): the worker validates them before their handler runs.
 */
export const uncheckedPayloads = new WeakSet<Job>();

/** Text as is: the type parsers of a query whose values {@link jobsFromClaim} converts itself. */
export const RAW_TEXT = { getTypeParser: () => (value: string) => value };

/** '-' */
const MINUS = 45;
/** '0' */
const ZERO = 48;

/**
 * The integer written in decimal in `s` from `from` to `to` (a sign, then digits), read without making a
 * string of it. Exact for every integer a job holds (int4 columns, epoch milliseconds).
 */
function integerAt(s: string, from: number, to: number): number {
  let i = from;
  const negative = s.charCodeAt(i) === MINUS;
  if (negative) i++;
  let n = 0;
  for (; i < to; i++) n = n * 10 + (s.charCodeAt(i) - ZERO);
  return negative ? -n : n;
}

/** One job from its head (see {@link ClaimedRow}), task, payload and extras. */
function jobFrom(head: string, task: string, payload: unknown, extras: Extras | null): Job {
  const job = jobFields(head, task, payload, extras);
  if (extras?.[5] === true) uncheckedPayloads.add(job);
  return job;
}

function jobFields(head: string, task: string, payload: unknown, extras: Extras | null): Job {
  const idEnd = head.indexOf(',');
  const priorityEnd = head.indexOf(',', idEnd + 1);
  const runAtEnd = head.indexOf(',', priorityEnd + 1);
  const attemptsEnd = head.indexOf(',', runAtEnd + 1);
  const maxAttemptsEnd = head.indexOf(',', attemptsEnd + 1);
  const tokenEnd = head.indexOf(',', maxAttemptsEnd + 1);
  const expiresEnd = head.indexOf(',', tokenEnd + 1);
  return {
    id: head.slice(0, idEnd),
    task,
    payload,
    priority: integerAt(head, idEnd + 1, priorityEnd),
    runAt: new Date(integerAt(head, priorityEnd + 1, runAtEnd)),
    attempts: integerAt(head, runAtEnd + 1, attemptsEnd),
    maxAttempts: integerAt(head, attemptsEnd + 1, maxAttemptsEnd),
    key: extras === null ? null : extras[0],
    lastError: extras === null ? null : extras[1],
    leaseToken: head.slice(maxAttemptsEnd + 1, tokenEnd),
    leaseExpiresAt: new Date(integerAt(head, tokenEnd + 1, expiresEnd)),
    createdAt: new Date(integerAt(head, expiresEnd + 1, head.length)),
    progress: extras === null ? null : extras[2],
    group: extras === null ? null : extras[3],
    traceContext: extras === null ? null : extras[4],
  };
}

/**
 * The jobs of a claim's row (see {@link ClaimedRow}); none when the claim took none.
 *
 * @example
 * const res = await pool.query({ text: claimSql, values, rowMode: 'array', types: RAW_TEXT });
 * const jobs = jobsFromClaim(res.rows[0]);
 */
export function jobsFromClaim(row: Readonly<ClaimedRow> | Readonly<LimitedClaimedRow> | undefined): Job[] {
  if (row === undefined || row[0] === null) return [];
  const heads = row[0].split(';');
  // The claim's own JSON arrays, as built by its SELECT: one element per job, in the heads' order.
  const tasks = JSON.parse(row[1] ?? '[]') as string[];
  const payloads = JSON.parse(row[2] ?? '[]') as unknown[];
  const extras = JSON.parse(row[3] ?? '[]') as (Extras | null)[];
  const jobs = new Array<Job>(heads.length);
  for (let i = 0; i < heads.length; i++)
    jobs[i] = jobFrom(heads[i] as string, tasks[i] as string, payloads[i], extras[i] ?? null);
  return jobs;
}
