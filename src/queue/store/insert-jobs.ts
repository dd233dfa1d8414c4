import pg from 'pg';

/**
 * The ONE insert into a queue's jobs table: a call of the schema's `insert_jobs` function (migration
 * 0008), whose statements each connection plans once and keeps. `enqueue`, `enqueueMany` and a schedule
 * pass's ticks all run it, so every way into the table has the same columns, defaults, unique-key rule
 * and group rule. Its parameters, in this order:
 *
 * | $ | value |
 * | --- | --- |
 * | 1 | task (text) |
 * | 2 | payloads (jsonb[]; one job per element, in order) |
 * | 3 | priority (int) |
 * | 4 | run_at for every job (timestamptz, NULL: now()) |
 * | 5 | max_attempts (int) |
 * | 6, 7 | backoff base and cap (ms) |
 * | 8 | keys (text[], one per payload, NULL elements for none) |
 * | 9 | groups (text[], one per payload, NULL elements for none) |
 * | 10 | trace context (jsonb, NULL for none) |
 * | 11 | run_at per job (timestamptz[], NULL elements: $4) |
 *
 * Locks (explained in the migration): ROW EXCLUSIVE on jobs. With a key, the partial unique index jobs_key
 * is checked by speculative insertion: a concurrent uncommitted insert of the same (task, key) makes the
 * call wait for that transaction, then DO NOTHING (keyed duplicates within one call are skipped the same
 * way). With a group, the groups' rows are created if missing (ROW EXCLUSIVE on job_groups; ON CONFLICT
 * DO NOTHING takes no lock on an existing row), in key order. The jobs table's statement-level trigger
 * sends at most one NOTIFY, delivered at COMMIT: the workers' wake-up. The function's rows are id, task,
 * state, run_at, key, group_key of the jobs inserted, under the names `inserted_id`, `inserted_task`, …
 * (a plpgsql function's result columns must not share its parameters' names).
 *
 * @example
 * const text = `SELECT inserted_id AS id FROM ${insertJobsCall('"jobs"')}`;
 */
export function insertJobsCall(quotedSchema: string): string {
  return `${quotedSchema}.insert_jobs($1::text, $2::jsonb[], $3::int, $4::timestamptz, $5::int, $6::int, $7::int,
        $8::text[], $9::text[], $10::jsonb, $11::timestamptz[])`;
}

/** The function's columns under the names of the table's. */
const INSERTED = `inserted_id AS id, inserted_task AS task, inserted_state AS state, inserted_run_at AS run_at,
             inserted_key AS key, inserted_group_key AS group_key`;

/** The values of {@link insertJobsCall}'s parameters: the jobs of one task and what they share. */
export interface JobRows {
  readonly task: string;
  /** Each job's payload as JSON text (already validated and serialized). */
  readonly payloads: readonly string[];
  readonly priority: number;
  readonly runAt: Date | null;
  readonly maxAttempts: number;
  readonly backoff: { readonly baseMs: number; readonly capMs: number };
  /** One key (or null) per payload. */
  readonly keys: readonly (string | null)[];
  /** One group (or null) per payload. */
  readonly groups: readonly (string | null)[];
  /** The producer's trace context (W3C carrier), or null. */
  readonly traceContext: Readonly<Record<string, string>> | null;
  /** One run_at (or null: `runAt`) per payload. */
  readonly runAts?: readonly (Date | null)[];
}

/**
 * The parameter list of {@link insertJobsCall} for `rows`.
 *
 * @example
 * await client.query(sql.enqueueMany, insertJobsValues({ task: 'email', payloads: ['{}'], … }));
 */
export function insertJobsValues(rows: JobRows): unknown[] {
  return [
    rows.task,
    rows.payloads,
    rows.priority,
    rows.runAt,
    rows.maxAttempts,
    rows.backoff.baseMs,
    rows.backoff.capMs,
    rows.keys,
    rows.groups,
    rows.traceContext === null ? null : JSON.stringify(rows.traceContext),
    rows.runAts ?? rows.payloads.map(() => null),
  ];
}

/** The statements built on the one insert, for the queue schema `schema`. */
export interface InsertStatements {
  /** One job (`created` true), or no row when its key is held by a live job of the task. */
  readonly enqueue: string;
  /** The live job of task $1 holding key $2, as `enqueue` returns a job (`created` false), if any. */
  readonly liveKeyed: string;
  /** Many jobs of one task; keyed duplicates skipped. Returns the ids inserted. */
  readonly enqueueMany: string;
  /** A schedule's ticks (key and run_at per tick). Returns id and key of each job inserted. */
  readonly insertTicks: string;
}

/**
 * Builds the {@link InsertStatements} of a queue schema.
 *
 * @example
 * const { enqueue } = insertStatements('pgtxkit_queue');
 */
export function insertStatements(schema: string): InsertStatements {
  const s = pg.escapeIdentifier(schema);
  const call = insertJobsCall(s);
  return {
    enqueue: `SELECT ${INSERTED}, true AS created FROM ${call}`,
    // After an enqueue whose key was held (no row): no lock, a snapshot read of the live job through the
    // partial unique index jobs_key. If that job ended in between, it finds nothing and enqueue() runs
    // the insert again (bounded). Measured (bench/queue/enqueue-variants.mjs, 3 interleaved rounds): the
    // insert and this read in one statement (the call in a CTE, UNION ALL the read), parsed and planned
    // at each call, cost every keyed enqueue 336 µs of server CPU (324–352) against 248 (244–252) for the
    // call alone with a key not held; the read is sent only when the key was held.
    liveKeyed: `
      SELECT id, task, state, run_at, key, group_key, false AS created FROM ${s}.jobs
       WHERE task = $1 AND key = $2 AND state IN ('pending', 'running')`,
    enqueueMany: `SELECT inserted_id AS id FROM ${call}`,
    // Runs in a schedule pass's transaction, which holds the schedule row's FOR UPDATE lock, with the
    // UPDATE that moves next_run_at past these ticks: a tick's job exists iff the schedule moved past it.
    insertTicks: `SELECT inserted_id AS id, inserted_key AS key FROM ${call}`,
  };
}
