import pg from 'pg';

/**
 * The columns a claimed job returns. Timestamps come as epoch milliseconds (float8): parsing three
 * timestamptz texts per job was the largest single cost of a claim on the worker's CPU.
 */
const epochMs = (column: string) => `(extract(epoch FROM ${column}) * 1000)::float8 AS ${column.slice(2)}_ms`;
const JOB_COLUMNS = `j.id, j.task, j.payload, j.priority, ${epochMs('j.run_at')}, j.attempts, j.max_attempts, j.key,
  j.last_error, j.lease_token, ${epochMs('j.lease_expires_at')}, ${epochMs('j.created_at')}, j.trace_context`;

/** The ON CONFLICT target matching the partial unique index jobs_key. */
const KEY_CONFLICT = `(task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running')`;

/**
 * Every statement the queue sends, built once per schema (identifiers quoted with escapeIdentifier;
 * all values are parameters). Each one says which locks it takes and why.
 */
export interface QueueStatements {
  readonly enqueue: string;
  readonly enqueueMany: string;
  readonly claim: string;
  readonly complete: string;
  readonly fail: string;
  readonly extend: string;
  readonly release: string;
  readonly reap: string;
  readonly cancel: string;
  readonly redrive: string;
  readonly stats: string;
  readonly tableStats: string;
  readonly notify: string;
}

/** Builds the {@link QueueStatements} of a queue schema. */
export function queueStatements(
  schema: string,
  options: { archive: boolean; channel: string },
): QueueStatements {
  const s = pg.escapeIdentifier(schema);
  const jobs = `${s}.jobs`;
  const archiveDone = (state: 'done' | 'cancelled', from: string) =>
    options.archive
      ? `, archived AS (
           INSERT INTO ${s}.jobs_archive (id, task, payload, state, attempts, key, last_error, created_at)
           SELECT id, task, payload, '${state}', attempts, key, last_error, created_at FROM ${from})`
      : '';
  return {
    // Lock: ROW EXCLUSIVE on jobs (any INSERT). With a key, the partial unique index jobs_key is checked
    // by speculative insertion: a concurrent uncommitted insert of the same (task, key) makes this wait
    // for that transaction, then DO NOTHING. No row lock is taken on the existing job; it is read in the
    // same statement. (If that job committed after this statement's snapshot, the read finds nothing and
    // enqueue() re-runs the statement with a new snapshot.) The statement-level trigger sends at most one
    // NOTIFY, delivered at COMMIT.
    enqueue: `
      WITH ins AS (
        INSERT INTO ${jobs} AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms, backoff_cap_ms, key, trace_context)
        VALUES ($1, $2::jsonb, $3, coalesce($4::timestamptz, now()), $5, $6, $7, $8, $9::jsonb)
        ON CONFLICT ${KEY_CONFLICT} DO NOTHING
        RETURNING j.id, j.task, j.state, j.run_at, j.key
      )
      SELECT id, task, state, run_at, key, true AS created FROM ins
      UNION ALL
      SELECT id, task, state, run_at, key, false AS created FROM ${jobs}
       WHERE $8::text IS NOT NULL AND task = $1 AND key = $8 AND state IN ('pending', 'running')
         AND NOT EXISTS (SELECT 1 FROM ins)`,
    // Lock: ROW EXCLUSIVE on jobs. One statement for any number of jobs (unnest of two parallel arrays),
    // so one round trip, one WAL flush at commit and ONE NOTIFY from the statement-level trigger.
    // Keyed duplicates (against live jobs or within the batch) are skipped by DO NOTHING.
    enqueueMany: `
      INSERT INTO ${jobs} (task, payload, priority, run_at, max_attempts, backoff_base_ms, backoff_cap_ms, key, trace_context)
      SELECT $1, t.payload, $3, coalesce($4::timestamptz, now()), $5, $6, $7, t.key, $9::jsonb
        FROM unnest($2::jsonb[], $8::text[]) WITH ORDINALITY AS t(payload, key, n)
       ORDER BY t.n
      ON CONFLICT ${KEY_CONFLICT} DO NOTHING
      RETURNING id`,
    // The claim: ONE statement (MATERIALIZED CTE with FOR UPDATE SKIP LOCKED, then UPDATE … RETURNING)
    // inside the function claim_jobs of migration 002, which pins its plan (enable_sort = off) so stale
    // statistics can never turn it into a sort of the whole backlog. Locks and plan choice are explained
    // there: FOR UPDATE row locks on the chosen pending rows, SKIP LOCKED, held only for this autocommit
    // statement; the lease (token + expiry) marks the job as taken afterwards.
    claim: `
      SELECT ${JOB_COLUMNS} FROM ${s}.claim_jobs($1::int, $2::float8, $3::text[]) AS j`,
    // Lock: FOR UPDATE (row lock of DELETE) on each job still running under its lease token. Fenced by
    // id + lease_token + state: a settle whose lease was lost (reaped, re-claimed, cancelled) matches
    // nothing and changes nothing. One statement for a whole batch (unnest). Done jobs are deleted (or
    // moved to jobs_archive) so the hot table stays small. The ids come back in ONE row (a text[]): 500
    // result rows cost the worker more to parse than the statement's own work.
    complete: `
      WITH done AS (
        DELETE FROM ${jobs} j
         USING unnest($1::bigint[], $2::uuid[]) AS i(id, token)
         WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
        RETURNING j.id, j.task, j.payload, j.attempts, j.key, j.last_error, j.created_at
      )${archiveDone('done', 'done')}
      SELECT coalesce(array_agg(id::text), '{}') AS ids FROM done`,
    // Lock: FOR NO KEY UPDATE (row lock of an UPDATE that leaves keys alone) on each job still running
    // under its token. Fenced like complete. Retry at now() + explicit delay, or the job's backoff with
    // full jitter; dead once attempts are used up (or when final).
    fail: `
      UPDATE ${jobs} j
         SET state = CASE WHEN i.final OR j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
             run_at = CASE WHEN i.final OR j.attempts >= j.max_attempts THEN j.run_at
                      ELSE now() + coalesce(i.delay_ms, ${s}.retry_delay_ms(j.attempts, j.backoff_base_ms, j.backoff_cap_ms))
                                   * interval '1 millisecond' END,
             last_error = i.error, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
        FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::float8[], $5::boolean[]) AS i(id, token, error, delay_ms, final)
       WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
      RETURNING j.id, j.state, j.run_at`,
    // Lock: FOR NO KEY UPDATE on each job still running under its token (heartbeat). Fenced.
    extend: `
      UPDATE ${jobs} j SET lease_expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
        FROM unnest($1::bigint[], $2::uuid[]) AS i(id, token)
       WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
      RETURNING j.id, j.lease_expires_at`,
    // Lock: FOR NO KEY UPDATE on each job still running under its token. Gives jobs back on shutdown
    // without charging the attempt (the handler did not fail). Fenced.
    release: `
      UPDATE ${jobs} j
         SET state = 'pending', attempts = greatest(j.attempts - 1, 0), run_at = now(),
             lease_token = NULL, lease_expires_at = NULL, updated_at = now()
        FROM unnest($1::bigint[], $2::uuid[]) AS i(id, token)
       WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
      RETURNING j.id`,
    // Lock: FOR UPDATE SKIP LOCKED on a batch of expired leases, then the UPDATE's row locks until the
    // statement ends. SKIP LOCKED: a job being settled right now (its row locked by a complete/fail) is
    // left alone, and several reapers never wait on each other. Fenced again in the UPDATE on state and
    // lease expiry (a lease extended meanwhile is not reaped). An expired lease is a failed attempt:
    // back to pending after the job's backoff, or dead when attempts are used up.
    reap: `
      WITH expired AS MATERIALIZED (
        SELECT id FROM ${jobs}
         WHERE state = 'running' AND lease_expires_at < now()
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
      )
      UPDATE ${jobs} j
         SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
             run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                      ELSE now() + ${s}.retry_delay_ms(j.attempts, j.backoff_base_ms, j.backoff_cap_ms)
                                   * interval '1 millisecond' END,
             last_error = 'lease expired (the worker died or stalled)',
             lease_token = NULL, lease_expires_at = NULL, updated_at = now()
        FROM expired e
       WHERE j.id = e.id AND j.state = 'running' AND j.lease_expires_at < now()
      RETURNING j.id, j.state`,
    // Lock: FOR UPDATE (DELETE) on one job in any state; waits for a settle in flight on that row, then
    // removes it. A worker still running it gets LeaseLost on its settle.
    cancel: `
      WITH gone AS (
        DELETE FROM ${jobs} j WHERE j.id = $1::bigint
        RETURNING j.id, j.task, j.payload, j.attempts, j.key, j.last_error, j.created_at
      )${archiveDone('cancelled', 'gone')}
      SELECT id FROM gone`,
    // Lock: FOR UPDATE SKIP LOCKED on the dead jobs chosen, then the UPDATE's row locks; FOR NO KEY
    // UPDATE on the older dead jobs of the same keys (their note). Only one job per (task, key) may be
    // live (jobs_key): of several dead jobs sharing a key, only the newest one chosen by the filter is
    // redriven, the others stay dead with a note saying which one was (before, two of them made the
    // whole batch fail with a UniqueViolation). A dead job whose key is live again stays dead too. A
    // concurrent enqueue or redrive of the same key can still win the race between this statement's
    // snapshot and its UPDATE (23505): redrive() then runs the statement again with a fresh snapshot.
    redrive: `
      WITH chosen AS MATERIALIZED (
        SELECT id, task, key FROM ${jobs}
         WHERE state = 'dead' AND ($1::text IS NULL OR task = $1) AND ($2::bigint[] IS NULL OR id = ANY($2))
      ),
      newest AS MATERIALIZED (
        SELECT c.id FROM chosen c
         WHERE c.key IS NULL
            OR NOT EXISTS (SELECT 1 FROM chosen n WHERE n.task = c.task AND n.key = c.key AND n.id > c.id)
      ),
      d AS MATERIALIZED (
        SELECT j.id FROM ${jobs} j
         WHERE j.id IN (SELECT id FROM newest) AND j.state = 'dead'
           AND NOT (j.key IS NOT NULL AND EXISTS (
             SELECT 1 FROM ${jobs} o WHERE o.task = j.task AND o.key = j.key AND o.state IN ('pending', 'running')))
         ORDER BY j.id
         LIMIT $3
         FOR UPDATE SKIP LOCKED
      ),
      up AS (
        UPDATE ${jobs} j SET state = 'pending', attempts = 0, run_at = now(), updated_at = now()
          FROM d WHERE j.id = d.id AND j.state = 'dead'
        RETURNING j.id, j.task, j.key
      ),
      noted AS (
        UPDATE ${jobs} o
           SET last_error = 'not redriven: job ' || up.id || ' with the same key was redriven; '
                            || regexp_replace(coalesce(o.last_error, ''), '^not redriven: [^;]*; ', ''),
               updated_at = now()
          FROM up
         WHERE up.key IS NOT NULL AND o.task = up.task AND o.key = up.key AND o.state = 'dead' AND o.id <> up.id
        RETURNING o.id
      )
      SELECT id FROM up ORDER BY id`,
    // Lock: ACCESS SHARE on jobs (plain read, MVCC snapshot): blocks nothing but DDL.
    stats: `
      SELECT count(*) FILTER (WHERE state = 'pending')::int AS pending,
             count(*) FILTER (WHERE state = 'pending' AND run_at <= now())::int AS ready,
             count(*) FILTER (WHERE state = 'running')::int AS running,
             count(*) FILTER (WHERE state = 'running' AND lease_expires_at < now())::int AS expired,
             count(*) FILTER (WHERE state = 'dead')::int AS dead,
             (extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now()))
               * 1000)::float8 AS oldest_ready_ms
        FROM ${jobs}`,
    // Lock: none (statistics view). Dead tuples show how much vacuum is behind on the hot table.
    tableStats: `
      SELECT n_live_tup::int AS live, n_dead_tup::int AS dead, last_autovacuum
        FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
    // Lock: none. Transactional: delivered at COMMIT (wakes workers after release/redrive).
    notify: `SELECT pg_notify(${pg.escapeLiteral(options.channel)}, '')`,
  };
}
