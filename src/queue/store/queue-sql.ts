import pg from 'pg';
import { claimedAggregates } from './claimed-aggregates.js';
import { archiveInsert, freeSlots, perGroup } from './settle-steps.js';

/**
 * Every statement the queue sends, built once per schema (identifiers quoted with escapeIdentifier;
 * all values are parameters). Each one says which locks it takes and why.
 */
export interface QueueStatements {
  readonly claim: string;
  readonly claimMeasured: string;
  readonly claimLimited: string;
  readonly claimLimitedMeasured: string;
  readonly complete: string;
  readonly completeUngrouped: string;
  readonly completeTakeNext: string;
  readonly fail: string;
  readonly extend: string;
  readonly release: string;
  readonly reap: string;
  readonly cancel: string;
  readonly progress: string;
  readonly job: string;
  readonly pruneArchive: string;
  readonly pruneDead: string;
  readonly redrive: string;
  readonly stats: string;
  readonly tableStats: string;
  readonly notify: string;
}

/** Builds the {@link QueueStatements} of a queue schema. */
export function queueStatements(
  schema: string,
  options: { archive: boolean; channel: string; cancelChannel: string },
): QueueStatements {
  const s = pg.escapeIdentifier(schema);
  const jobs = `${s}.jobs`;
  const channel = pg.escapeLiteral(options.channel);
  const slots = (from: string) => freeSlots(`${s}.job_groups`, jobs, channel, perGroup(from));
  /** Reads slot_wake once, so the NOTIFY step runs. */
  const woke = '(SELECT count(*) FROM slot_wake) AS woke';
  // The smallest (run_at, id) a claim took, run_at as whole epoch ms (floor): arrays compare element by
  // element. No ORDER BY inside an aggregate: the planner would sort the claim's rows for it, and the
  // jobs would no longer come back in claim order.
  const minKey =
    'min(ARRAY[floor(extract(epoch FROM j.run_at) * 1000)::bigint, j.id]) FILTER (WHERE j.id IS NOT NULL)';
  const readCount = `pg_stat_get_xact_tuples_returned(${pg.escapeLiteral(`${s}.jobs_claimable`)}::regclass)`;
  const archiveDone = (state: 'done' | 'cancelled', from: string) =>
    options.archive ? `, archived AS (${archiveInsert(`${s}.jobs_archive`, state, from)})` : '';
  // Lock: FOR UPDATE (row lock of DELETE) on each job still running under its lease token. Fenced by
  // id + lease_token + state: a settle whose lease was lost (reaped, re-claimed, cancelled) matches
  // nothing and changes nothing. One statement for a whole batch. Done jobs are deleted (or moved to
  // jobs_archive) so the hot table stays small. The DELETE is the function complete_jobs of migration
  // 0009, whose only plan reads the primary key for the ids whatever the statistics: written here, the
  // planner chose for 100 ids or more a scan of jobs_leases, every running job and every entry a job
  // completed while a session held the MVCC horizon left behind (to find 100 jobs: 15 shared buffers
  // after 200 jobs completed under a held snapshot, 159 after 5,000, growing with them; by the primary
  // key 202 and 202).
  // MATERIALIZED: the function runs once. The ids come back in ONE row (a text[]): 500 result rows cost
  // the worker more to parse than the statement's own work. `grouped`: with the steps that give the
  // group slots back (and the wake-up).
  const completion = (grouped: boolean) => `
      WITH done AS MATERIALIZED (
        SELECT j.id, j.task, j.payload, j.attempts, j.key, j.last_error, j.created_at, j.progress, j.group_key
          FROM ${s}.complete_jobs($1::bigint[], $2::uuid[]) j
      )${archiveDone('done', 'done')}${grouped ? slots('done') : ''}
      SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM done) AS ids${grouped ? `, ${woke}` : ''}`;
  return {
    // The claim: ONE call of claim_jobs_packed (migration 0008: claim_jobs of 0005, from the front here,
    // in plpgsql with its plans kept per connection), which returns the one row of aggregates itself
    // (see claimed-aggregates.ts). Its plan is pinned (enable_sort = off, enable_seqscan = off) so stale
    // statistics can never turn it into a sort of the whole backlog. Locks and plan choice are explained
    // there: FOR UPDATE row locks on the chosen pending rows, SKIP LOCKED, held only for this autocommit
    // statement; the lease (token + expiry) marks the job as taken afterwards. It keeps the group
    // counters true (a grouped job it claims counts as running; a claim of ungrouped jobs skips the step).
    claim: `
      SELECT * FROM ${s}.claim_jobs_packed($1::int, $2::float8, $3::text[], '-infinity'::timestamptz, 0::bigint)`,
    // The claim with what the claim floor needs (see claim-floor.ts): from ($4, $5), the floor, run_at as
    // epoch ms and id (-Infinity: from the front, a sweep). After the jobs: the entries of jobs_claimable
    // it read (the server's count for its statistics, read before the claim, b, which the LATERAL call
    // waits for, and after it, in the select list evaluated after the aggregates' input: no lock, no I/O;
    // the count runs on between two flushes of the statistics, hence the difference), its now(), the
    // smallest key it took, and claim_floor_behind (a snapshot read, no lock: one index probe with a
    // single priority in use). LEFT JOIN: one row when nothing was claimed too (an empty claim can walk
    // far). Same locks as claim. Its extra steps cost about half a plain claim's server CPU (measured on a
    // claim of 16): the worker sends it only while the floor is in use, and once a second otherwise.
    claimMeasured: `
      SELECT ${claimedAggregates(' FILTER (WHERE j.id IS NOT NULL)')},
             ${readCount} - max(b.read_before) AS walked,
             count(j.id) AS claimed, floor(extract(epoch FROM now()) * 1000) AS at_ms,
             (${minKey})[1] AS min_at_ms, (${minKey})[2] AS min_id,
             CASE WHEN count(j.id) > 0 THEN ${s}.claim_floor_behind($3::text[], max(j.priority), max(b.from_at),
               $5::bigint, to_timestamp((${minKey})[1]::float8 / 1000), (${minKey})[2])
             ELSE false END AS behind
        FROM (SELECT ${readCount} AS read_before, to_timestamp($4::float8 / 1000) AS from_at OFFSET 0) b
        LEFT JOIN LATERAL ${s}.claim_jobs($1::int, $2::float8, $3::text[], b.from_at, $5::bigint) AS j ON true`,
    // The claim of a queue with limits (groups, task rates): the function claim_jobs_limited of migration
    // 3, one plpgsql call in this autocommit statement. Locks (explained there): FOR UPDATE SKIP LOCKED on
    // the candidate groups and rated tasks (their counters read on the newest version and held until the
    // statement ends), then FOR UPDATE SKIP LOCKED on the chosen jobs; it never waits for a lock. A row
    // with a NULL id is not a job: its wait_ms says when a full rate window frees a place (one per pass
    // at most: the soonest counts).
    // Called from the front (the six-argument claim_jobs_limited of migration 0012; its row of what the
    // floor may rise to, not a job, is left out by the aggregates' filter).
    claimLimited: `
      SELECT ${claimedAggregates(' FILTER (WHERE j.id IS NOT NULL)')}, min(r.wait_ms) AS wait_ms
        FROM ${s}.claim_jobs_limited($1::int, $2::float8, $3::text[], $4::jsonb, '-infinity'::timestamptz, 0::bigint) AS r
        CROSS JOIN LATERAL (SELECT (r.job).*) AS j`,
    // The limited claim with what the claim floor needs, as claimMeasured for the plain claim: from ($5,
    // $6), the floor (-Infinity: a sweep); after the jobs and the wait, the entries of jobs_claimable it
    // read (counted as in claimMeasured), the jobs claimed, its now(), the smallest key it took, and the
    // key the floor may not pass (the function's row for it, one: bound_ms, bound_id; see migration
    // 0012), -Infinity (the floor stays) when its head window was full and a ready job of a later
    // priority than the window's last (bound_priority) lies between the floor and that key
    // (claim_floor_behind: a snapshot read, no lock, one index probe with a single priority; here, not
    // in the function, so that only the measured claim runs it). Same locks as claimLimited.
    claimLimitedMeasured: `
      SELECT ${claimedAggregates(' FILTER (WHERE j.id IS NOT NULL)')}, min(r.wait_ms) AS wait_ms,
             ${readCount} - max(b.read_before) AS walked,
             count(j.id) AS claimed, floor(extract(epoch FROM now()) * 1000) AS at_ms,
             (${minKey})[1] AS min_at_ms, (${minKey})[2] AS min_id,
             CASE WHEN min(r.bound_priority) IS NOT NULL
                   AND ${s}.claim_floor_behind($3::text[], min(r.bound_priority), max(b.from_at), $6::bigint,
                         to_timestamp(min(r.bound_ms) / 1000), min(r.bound_id))
                  THEN '-Infinity'::float8 ELSE min(r.bound_ms) END AS bound_ms,
             min(r.bound_id) AS bound_id
        FROM (SELECT ${readCount} AS read_before, to_timestamp($5::float8 / 1000) AS from_at OFFSET 0) b
        CROSS JOIN LATERAL ${s}.claim_jobs_limited($1::int, $2::float8, $3::text[], $4::jsonb, b.from_at, $6::bigint) AS r
        CROSS JOIN LATERAL (SELECT (r.job).*) AS j`,
    // The completion (see `completion` above for its lock, fence and plan), with the group steps.
    complete: completion(true),
    // As complete, for jobs without a group only (the worker's batches of ungrouped jobs): no group
    // steps, so nothing to plan or run for them. Same lock and fence. A job's group is set at enqueue
    // and never changes, so a claimed job with no group has no slot to give back.
    completeUngrouped: completion(false),
    // The worker's completion of a batch with grouped jobs on a queue whose limits are concurrency only
    // ($5, the claim's declaration): as complete, and for each group that had k jobs completed it TAKES
    // the group's next k ready jobs for the completing worker (leased with $3 ms, tasks $4; at most $6 in
    // all, the worker's free room), in claim order within the group. The group's running count stays as
    // it was (k jobs out, k in): its row is neither locked nor written, and no claim has to find the
    // group again. Only the slots not taken over are given back (the steps of complete, with their
    // wake-up).
    // Why the limit holds: this statement never raises a group's count. It takes over only where the
    // group's count, as of its snapshot, is within the declared concurrency (after a limit was lowered,
    // slots are given back until the count is within it again); a count is only ever raised by a claim,
    // under the group's row lock, within its limit.
    // Fairness: a job is taken over only when no ready job of the worker's tasks has a better priority
    // (one index probe per distinct priority of the jobs found, for a ready job below it: migration
    // 0013); otherwise the slot goes back and the claims choose in claim order.
    // Locks: FOR UPDATE (DELETE) on the completed jobs, fenced as in complete; FOR UPDATE SKIP LOCKED on
    // the jobs taken over (re-checked on their newest version: still pending and ready; one locked by a
    // claim or another settle is skipped, never waited for); the group steps of complete for the slots
    // given back. No new lock order: the only lock waited for is a group row's, in key order, after
    // every job lock, as in complete. The steps are the function complete_take_next of migration 0001
    // (two statements, the second under a new snapshot; plans kept per connection), all inside this
    // autocommit statement. It returns one row: the ids completed, the wake-up, and the jobs taken over
    // as a claim returns its jobs.
    completeTakeNext: `
      SELECT r.done, r.woke, r.heads, r.task_names, r.payloads, r.extras
        FROM ${s}.complete_take_next($1::bigint[], $2::uuid[], $3::float8, $4::text[], $5::jsonb, $6::int,
                                     ${options.archive ? 'true' : 'false'}) AS r`,
    // Lock: FOR NO KEY UPDATE (row lock of an UPDATE that leaves keys alone) on each job still running
    // under its token. Fenced like complete. Retry at now() + explicit delay, or the job's backoff with
    // full jitter; dead once attempts are used up (or when final). Frees the group slots. The UPDATE is
    // the function fail_jobs of migration 0009, for the plan of the completion's (see `completion`).
    fail: `
      WITH failed AS MATERIALIZED (
        SELECT j.id, j.state, j.run_at, j.group_key
          FROM ${s}.fail_jobs($1::bigint[], $2::uuid[], $3::text[], $4::float8[], $5::boolean[]) j
      )${slots('failed')}
      SELECT f.id, f.state, f.run_at, w.woke FROM failed f, (SELECT ${woke}) w`,
    // Lock: FOR NO KEY UPDATE on each job still running under its token (heartbeat). Fenced. The UPDATE
    // is the function extend_leases of migration 0009, for the plan of the completion's.
    extend: `
      SELECT j.id, j.lease_expires_at FROM ${s}.extend_leases($1::bigint[], $2::uuid[], $3::float8) j`,
    // Lock: FOR NO KEY UPDATE on each job still running under its token. Gives jobs back on shutdown
    // without charging the attempt (the handler did not fail). Fenced. Frees the group slots. The UPDATE
    // is the function release_jobs of migration 0009, for the plan of the completion's.
    release: `
      WITH released AS MATERIALIZED (
        SELECT j.id, j.group_key FROM ${s}.release_jobs($1::bigint[], $2::uuid[]) j
      )${slots('released')}
      SELECT r.id, w.woke FROM released r, (SELECT ${woke}) w`,
    // Lock: FOR UPDATE SKIP LOCKED on a batch of expired leases, then the UPDATE's row locks until the
    // statement ends. SKIP LOCKED: a job being settled right now (its row locked by a complete/fail) is
    // left alone, and several reapers never wait on each other. Fenced again in the UPDATE on state and
    // lease expiry (a lease extended meanwhile is not reaped). An expired lease is a failed attempt:
    // back to pending after the job's backoff, or dead when attempts are used up. Frees the group slots.
    // From $2 (epoch ms; -Infinity: from the front, a sweep): the reap floor (see reap-floor.ts), where
    // the scan of jobs_leases starts, past the entries the jobs completed while a session held the MVCC
    // horizon left behind. One row even when nothing was reaped (a NULL id): the statement's now(),
    // epoch ms (floor), for the floor.
    reap: `
      WITH expired AS MATERIALIZED (
        SELECT id FROM ${jobs}
         WHERE state = 'running' AND lease_expires_at < now()
           AND lease_expires_at >= to_timestamp($2::float8 / 1000)
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
      ),
      reaped AS (
      UPDATE ${jobs} j
         SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
             run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                      ELSE now() + ${s}.retry_delay_ms(j.attempts, j.backoff_base_ms, j.backoff_cap_ms)
                                   * interval '1 millisecond' END,
             last_error = 'lease expired (the worker died or stalled)',
             lease_token = NULL, lease_expires_at = NULL, updated_at = now()
        FROM expired e
       WHERE j.id = e.id AND j.state = 'running' AND j.lease_expires_at < now()
      RETURNING j.id, j.state, j.group_key
      )${slots('reaped')}
      SELECT r.id, r.state, w.woke, floor(extract(epoch FROM now()) * 1000) AS at_ms
        FROM (SELECT ${woke}) w LEFT JOIN reaped r ON true`,
    // Lock: FOR UPDATE (DELETE) on one job in any state; waits for a settle in flight on that row (if
    // that settle commits first, the job is gone and this matches nothing: NotFound), then removes it.
    // Returns the state it was in. A running job frees its group's slot (the group row's lock, as in
    // every settle) and its id is sent on the cancel channel (pg_notify, delivered when this autocommit
    // statement commits): the worker running it hears it on its LISTEN session and aborts the handler's
    // signal; its later settle matches nothing (the row is gone), so it writes nothing. Without LISTEN,
    // that worker's heartbeat finds the lease gone.
    cancel: `
      WITH gone AS (
        DELETE FROM ${jobs} j WHERE j.id = $1::bigint
        RETURNING j.id, j.task, j.payload, j.state, j.attempts, j.key, j.last_error, j.created_at, j.progress, j.group_key
      )${archiveDone('cancelled', 'gone')}${slots("(SELECT group_key FROM gone WHERE state = 'running')")}
      SELECT g.id::text AS id, g.state,
             CASE WHEN g.state = 'running' THEN pg_notify(${pg.escapeLiteral(options.cancelChannel)}, g.id::text) END AS notified,
             w.woke
        FROM gone g, (SELECT ${woke}) w`,
    // Lock: FOR NO KEY UPDATE on the one job, only while it is still running under the caller's lease
    // token (fenced like complete: a lost lease matches nothing and writes nothing). updated_at is left
    // alone so the row version can stay a HOT update (progress is in no index).
    progress: `
      UPDATE ${jobs} j SET progress = $3::jsonb
       WHERE j.id = $1::bigint AND j.lease_token = $2::uuid AND j.state = 'running'
      RETURNING j.id`,
    // Lock: ACCESS SHARE on jobs and jobs_archive (plain reads). ONE statement, so one snapshot: a job
    // moving to the archive meanwhile is seen in exactly one of the two tables.
    job: `
      SELECT id::text AS id, task, payload, state, attempts, key, last_error, progress, created_at,
             run_at, max_attempts, lease_expires_at, NULL::timestamptz AS finished_at
        FROM ${jobs} WHERE id = $1::bigint
      UNION ALL
      SELECT id::text, task, payload, state, attempts, key, last_error, progress, created_at,
             NULL, NULL, NULL, finished_at
        FROM ${s}.jobs_archive WHERE id = $1::bigint`,
    // Lock: ROW EXCLUSIVE on jobs_archive, and row locks (FOR UPDATE, SKIP LOCKED) on at most $2 rows,
    // held only for this autocommit statement: prune() runs one such batch per statement, never one big
    // transaction. Oldest first through jobs_archive_finished (an index range scan). SKIP LOCKED: two
    // pruners never wait on each other. Nothing else writes archived rows, so nothing waits on these.
    pruneArchive: `
      WITH doomed AS MATERIALIZED (
        SELECT id FROM ${s}.jobs_archive
         WHERE finished_at < now() - $1::float8 * interval '1 millisecond'
         ORDER BY finished_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${s}.jobs_archive a USING doomed d WHERE a.id = d.id`,
    // Lock: ROW EXCLUSIVE on jobs, and FOR UPDATE row locks (SKIP LOCKED) on at most $2 dead jobs, for
    // this autocommit statement only; through the partial index jobs_dead_since. SKIP LOCKED: a dead job
    // being redriven right now is left alone; the DELETE re-checks state (a job redriven between the
    // snapshot and the lock is pending again and stays).
    pruneDead: `
      WITH doomed AS MATERIALIZED (
        SELECT id FROM ${jobs}
         WHERE state = 'dead' AND updated_at < now() - $1::float8 * interval '1 millisecond'
         ORDER BY updated_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${jobs} j USING doomed d WHERE j.id = d.id AND j.state = 'dead'`,
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
