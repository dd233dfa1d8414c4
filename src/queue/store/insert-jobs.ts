import pg from 'pg';

/** The ON CONFLICT target matching the partial unique index jobs_key. */
export const KEY_CONFLICT = `(task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running')`;

/**
 * The ONE insert into a queue's jobs table, as the CTEs `grp` (the jobs' groups) and `ins` (the jobs):
 * `enqueue`, `enqueueMany` and a schedule pass's ticks all run it, so every way into the table has the
 * same columns, defaults, unique-key rule and group rule. Its parameters, in this order:
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
 * Locks: ROW EXCLUSIVE on jobs. With a key, the partial unique index jobs_key is checked by speculative
 * insertion: a concurrent uncommitted insert of the same (task, key) makes the statement wait for that
 * transaction, then DO NOTHING (keyed duplicates within one call are skipped the same way). The groups
 * are created if missing (ROW EXCLUSIVE on job_groups; ON CONFLICT DO NOTHING takes no lock on an existing
 * row), in key order: two inserts creating the same new groups wait for each other in one order, never
 * deadlock. The jobs table's statement-level trigger sends at most one NOTIFY, delivered at COMMIT: the
 * workers' wake-up. `ins` returns id, task, state, run_at, key, group_key of the jobs inserted.
 *
 * @example
 * const text = `WITH ${insertJobsCtes('"jobs"')} SELECT id FROM ins`;
 */
export function insertJobsCtes(quotedSchema: string): string {
  return `grp AS (
        INSERT INTO ${quotedSchema}.job_groups (key)
        SELECT DISTINCT g FROM unnest($9::text[]) AS g WHERE g IS NOT NULL ORDER BY g
        ON CONFLICT (key) DO NOTHING
      ),
      ins AS (
        INSERT INTO ${quotedSchema}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                          backoff_cap_ms, key, group_key, trace_context)
        SELECT $1, t.payload, $3, coalesce(t.run_at, $4::timestamptz, now()), $5, $6, $7, t.key, t.group_key,
               $10::jsonb
          FROM unnest($2::jsonb[], $8::text[], $9::text[], $11::timestamptz[])
               WITH ORDINALITY AS t(payload, key, group_key, run_at, n)
         ORDER BY t.n
        ON CONFLICT ${KEY_CONFLICT} DO NOTHING
        RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key
      )`;
}

/** The values of {@link insertJobsCtes}'s parameters: the jobs of one task and what they share. */
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
 * The parameter list of {@link insertJobsCtes} for `rows`.
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
  /** One job; a live job of the task with the same key comes back instead (`created` false). */
  readonly enqueue: string;
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
  const ctes = insertJobsCtes(s);
  return {
    // The keyed job that blocked the insert is read in the same statement (no row lock): if it committed
    // after this statement's snapshot the read finds nothing, and enqueue() runs it again.
    enqueue: `
      WITH ${ctes}
      SELECT id, task, state, run_at, key, group_key, true AS created FROM ins
      UNION ALL
      SELECT id, task, state, run_at, key, group_key, false AS created FROM ${s}.jobs
       WHERE ($8::text[])[1] IS NOT NULL AND task = $1 AND key = ($8::text[])[1] AND state IN ('pending', 'running')
         AND NOT EXISTS (SELECT 1 FROM ins)`,
    enqueueMany: `
      WITH ${ctes}
      SELECT id FROM ins`,
    // Runs in a schedule pass's transaction, which holds the schedule row's FOR UPDATE lock, with the
    // UPDATE that moves next_run_at past these ticks: a tick's job exists iff the schedule moved past it.
    insertTicks: `
      WITH ${ctes}
      SELECT id, key FROM ins`,
  };
}
