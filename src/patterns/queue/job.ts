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
  /** The payload, as validated by the task's schema when it was enqueued. */
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

/** Raw row of a claimed job (timestamps as epoch milliseconds). */
export interface JobRow {
  id: string;
  task: string;
  payload: unknown;
  priority: number;
  run_at_ms: number;
  attempts: number;
  max_attempts: number;
  key: string | null;
  last_error: string | null;
  lease_token: string;
  lease_expires_at_ms: number;
  created_at_ms: number;
  progress: unknown;
  group_key: string | null;
  trace_context: Record<string, string> | null;
}

/** Maps a claimed row to a {@link Job}. */
export function jobFromRow(row: JobRow): Job {
  return {
    id: String(row.id),
    task: row.task,
    payload: row.payload,
    priority: row.priority,
    runAt: new Date(row.run_at_ms),
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    key: row.key,
    lastError: row.last_error,
    leaseToken: row.lease_token,
    leaseExpiresAt: new Date(row.lease_expires_at_ms),
    createdAt: new Date(row.created_at_ms),
    progress: row.progress ?? null,
    group: row.group_key,
    traceContext: row.trace_context ?? null,
  };
}
