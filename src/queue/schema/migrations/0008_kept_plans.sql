-- pg-txkit queue schema, migration 0008: the one insert into jobs and the plain claim as functions whose
-- plans a connection keeps, without the group steps (and the insert without the unique-key step) for
-- jobs that do not need them.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: enqueue(), enqueueMany() and a schedule pass's ticks sent the insert as one statement of two
-- data-modifying CTEs (the groups' rows, then the jobs with ON CONFLICT on the unique key), unnamed, so
-- the server parsed, analyzed and planned it again at every call: for one job, more than half of the
-- statement's server CPU. Measured (bench/queue/enqueue-variants.mjs, one job per statement, one
-- connection, a LISTEN session connected, the whole server's CPU from /proc, PostgreSQL 18.4, 3
-- interleaved rounds, µs per job, median (min–max)): the statement as sent 450 (413–507), the same
-- statement prepared once 217 (190–220); the call of insert_jobs below 257 (247–263), 340 (327–373)
-- through the keyed enqueue's statement (the call and the keyed read) with no key; of it, the
-- jobs_notify trigger's NOTIFY 84 (with the trigger disabled 173; a trigger without its transition
-- table cost as much, 270 against 245 in a second run: the price is the NOTIFY's, which a worker needs).
-- graphile-worker's add_job() 520 (503–717) in the same rounds.
-- A plpgsql function keeps each statement's plan for the connection (a new connection, a PgBouncer
-- transaction-mode client included, plans it at its first call), and the statement the client sends
-- is a call of it, parsed in microseconds.
-- The steps a job without a group or a key does not need are left out, with the same result:
-- - the groups' rows are created only when a job has a group (a statement of nothing otherwise, but
--   one that opened job_groups and its index for writing, ROW EXCLUSIVE, at every enqueue);
-- - ON CONFLICT only when a job has a key: a job with key NULL is outside the partial unique index
--   jobs_key (key IS NOT NULL …), so it can never conflict, and without the clause PostgreSQL inserts
--   it directly instead of by speculative insertion (a speculative-insertion lock, a pre-check of the
--   index, and a second WAL record confirming the tuple, per job).
--
-- insert_jobs(task, payloads, priority, run_at, max_attempts, backoff_base_ms, backoff_cap_ms, keys,
-- groups, trace_context, run_ats): the insert of src/queue/store/insert-jobs.ts (its parameters in the
-- same order): one job per element of payloads, with keys[i], groups[i] and coalesce(run_ats[i], run_at,
-- now()); keyed duplicates (a live job of the task with the key, or an earlier element of the same call)
-- are skipped. Returns id, task, state, run_at, key and group_key of each job inserted.
-- Locks: ROW EXCLUSIVE on jobs. With a key, the partial unique index jobs_key is checked by speculative
-- insertion: a concurrent uncommitted insert of the same (task, key) makes it wait for that transaction,
-- then DO NOTHING. With a group, the groups' rows are created if missing (ROW EXCLUSIVE on job_groups;
-- ON CONFLICT DO NOTHING takes no lock on an existing row), in key order: two inserts creating the same
-- new groups wait for each other in one order, never deadlock. Each statement of the function takes its
-- own snapshot in READ COMMITTED (the insert of the jobs does not read the groups' rows). The jobs
-- table's statement-level trigger (jobs_notify) sends at most one NOTIFY per call, delivered at COMMIT.
-- Plans: no step reads a table (unnest of the arguments; the unique index only as ON CONFLICT's
-- arbiter), so a kept generic plan is the same as a fresh one.
-- CREATE FUNCTION takes no lock on the tables.
CREATE FUNCTION {{schema}}.insert_jobs(
    task text, payloads jsonb[], priority integer, run_at timestamptz, max_attempts integer,
    backoff_base_ms integer, backoff_cap_ms integer, keys text[], groups text[], trace_context jsonb,
    run_ats timestamptz[])
  RETURNS TABLE (inserted_id bigint, inserted_task text, inserted_state text, inserted_run_at timestamptz,
                 inserted_key text, inserted_group_key text)
  LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
  IF cardinality(array_remove(insert_jobs.groups, NULL)) > 0 THEN
    INSERT INTO {{schema}}.job_groups (key)
    SELECT DISTINCT g FROM unnest(insert_jobs.groups) AS g WHERE g IS NOT NULL ORDER BY g
    ON CONFLICT (key) DO NOTHING;
  END IF;
  IF cardinality(array_remove(insert_jobs.keys, NULL)) > 0 THEN
    RETURN QUERY
    INSERT INTO {{schema}}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                      backoff_cap_ms, key, group_key, trace_context)
    SELECT insert_jobs.task, t.payload, insert_jobs.priority, coalesce(t.run_at, insert_jobs.run_at, now()),
           insert_jobs.max_attempts, insert_jobs.backoff_base_ms, insert_jobs.backoff_cap_ms, t.key,
           t.group_key, insert_jobs.trace_context
      FROM unnest(insert_jobs.payloads, insert_jobs.keys, insert_jobs.groups, insert_jobs.run_ats)
           WITH ORDINALITY AS t(payload, key, group_key, run_at, n)
     ORDER BY t.n
    ON CONFLICT (task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
    RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key;
  ELSE
    RETURN QUERY
    INSERT INTO {{schema}}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                      backoff_cap_ms, key, group_key, trace_context)
    SELECT insert_jobs.task, t.payload, insert_jobs.priority, coalesce(t.run_at, insert_jobs.run_at, now()),
           insert_jobs.max_attempts, insert_jobs.backoff_base_ms, insert_jobs.backoff_cap_ms, NULL,
           t.group_key, insert_jobs.trace_context
      FROM unnest(insert_jobs.payloads, insert_jobs.groups, insert_jobs.run_ats)
           WITH ORDINALITY AS t(payload, group_key, run_at, n)
     ORDER BY t.n
    RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key;
  END IF;
END $$;

-- The plain claim (a queue without limits) as ONE call that returns the one row of aggregates the worker
-- decodes (heads, tasks, payloads, extras: ClaimedRow in src/queue/job.ts, built as claimedAggregates in
-- src/queue/store/claimed-aggregates.ts builds it, which test/integration/queue-stored-shapes.test.ts
-- holds together with the decoder). The worker sent `SELECT <the aggregates> FROM claim_jobs(…)`
-- unnamed: its select list was parsed and planned at every claim. Measured (bench/queue/
-- claim-variants.mjs, claims of 8 on a queue without groups, one connection, its backend's CPU, 3
-- interleaved rounds): 620 µs per claim (620–640) unnamed, 510 (400–540) prepared once, 450 (420–480)
-- for claim_jobs_packed below (its plans kept, the aggregates in it, no group steps).
-- claim_jobs_packed(n, lease_ms, tasks, from_at, from_id): claim_jobs of migration 0005 (the same
-- choice, lock and lease of up to n ready jobs from the key (from_at, from_id); '-infinity' is a claim
-- from the front) in plpgsql, whose plans each connection keeps, with its group steps run only when a
-- claimed job has a group: a claim of ungrouped jobs does not open job_groups. The group steps are
-- a second statement of the same call, in the caller's transaction: the job rows stay locked (FOR UPDATE
-- by the UPDATE) until it commits, and no other statement sees the jobs running before their groups'
-- counters grew.
-- Locks: FOR UPDATE SKIP LOCKED on the chosen pending rows (the lease UPDATE keeps them until the
-- calling autocommit statement ends); then, for a claim of grouped jobs, FOR UPDATE on the groups of the
-- claimed jobs IN KEY ORDER (primary-key probes, returned in key order), which the counter UPDATE then
-- updates without waiting. The counter UPDATE reads the locked keys: in claim_jobs of 0005 the locking
-- step (gl) was a CTE that no part of the statement read, and PostgreSQL does not run such a SELECT, so
-- the counters' UPDATE locked the groups in the order of its join. Waiting for a group row here holds
-- only job rows no other statement waits for (locked with SKIP LOCKED, not running yet), and a limited
-- claim holding a group never waits: no deadlock.
-- Plans: the ordered index scan of jobs_claimable, with the key bound as an index condition, and the
-- TID scan of the lease UPDATE, as claim_jobs (enable_sort = off, enable_seqscan = off: the only plans
-- whatever the statistics were when the connection planned them; see 0001 and 0005). The aggregates read
-- the claimed rows in claim order (a sort of the n rows claimed, the one sort there is).
-- CREATE FUNCTION takes no lock on the tables. claim_jobs stays (the worker's measured claim, see
-- claim-floor.ts, and a worker of the previous version during a rolling deploy call it).
CREATE FUNCTION {{schema}}.claim_jobs_packed(n integer, lease_ms double precision, tasks text[],
                                             from_at timestamptz, from_id bigint)
  RETURNS TABLE (heads text, task_names json, payloads json, extras json)
  LANGUAGE plpgsql VOLATILE
  SET enable_sort = off
  SET enable_seqscan = off
AS $$
DECLARE
  claimed_groups text[];
BEGIN
  WITH c AS MATERIALIZED (
    SELECT ctid AS tid FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(claim_jobs_packed.tasks)
       AND (run_at, id) >= (claim_jobs_packed.from_at, claim_jobs_packed.from_id)
     ORDER BY priority, run_at, id
     LIMIT claim_jobs_packed.n
     FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + claim_jobs_packed.lease_ms * interval '1 millisecond', updated_at = now()
      WHERE j.ctid = ANY(ARRAY(SELECT tid FROM c))
    RETURNING j.*
  )
  SELECT string_agg(concat_ws(',', j.id, j.priority, floor(extract(epoch FROM j.run_at) * 1000)::bigint, j.attempts,
           j.max_attempts, j.lease_token, floor(extract(epoch FROM j.lease_expires_at) * 1000)::bigint,
           floor(extract(epoch FROM j.created_at) * 1000)::bigint), ';'),
         json_agg(j.task), json_agg(j.payload),
         json_agg(CASE WHEN j.key IS NOT NULL OR j.last_error IS NOT NULL OR j.progress IS NOT NULL OR j.group_key IS NOT NULL
                         OR j.trace_context IS NOT NULL OR NOT j.payload_checked
                       THEN json_build_array(j.key, j.last_error, j.progress, j.group_key, j.trace_context, NOT j.payload_checked) END),
         array_agg(j.group_key) FILTER (WHERE j.group_key IS NOT NULL)
    INTO heads, task_names, payloads, extras, claimed_groups
    FROM (SELECT * FROM up ORDER BY priority, run_at, id) j;
  IF claimed_groups IS NOT NULL THEN
    WITH claimed AS MATERIALIZED (
      SELECT g AS key, count(*)::int AS k FROM unnest(claimed_groups) AS g GROUP BY g
    ),
    gl AS MATERIALIZED (
      -- Lock: FOR UPDATE on the claimed jobs' groups in key order (see above).
      SELECT g.key FROM {{schema}}.job_groups g
       WHERE g.key = ANY(ARRAY(SELECT key FROM claimed))
       ORDER BY g.key
       FOR UPDATE OF g
    )
    -- The counters of the rows locked in gl (no wait): they grow by the jobs claimed now.
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k
      FROM claimed c
     WHERE g.key = c.key AND g.key = ANY(ARRAY(SELECT key FROM gl));
  END IF;
  RETURN NEXT;
END $$;

-- claim_jobs (the claim from a key, migration 0005; the worker's measured claim and sweep, see
-- claim-floor.ts, and through the three-argument claim_jobs a worker of the previous version) as in
-- 0005, its counters' UPDATE now reading the group keys locked in gl: in 0005 no part of the statement
-- read gl, PostgreSQL does not run a SELECT CTE that nothing reads, and the UPDATE locked the groups in
-- the order of its join instead of in key order (test/integration/queue-claim-packed.test.ts holds a
-- group and checks that a claim waiting for it already holds the group before it in key order).
-- Same signature: CREATE OR REPLACE keeps the function's grants; its SET options are given again
-- (CREATE OR REPLACE would otherwise drop them); no lock on the tables (a claim running meanwhile
-- finishes on the old body). Locks and plan: those of 0005, the groups locked in key order.
CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[],
                                                 from_at timestamptz, from_id bigint)
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
  SET enable_seqscan = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT ctid AS tid FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
       AND (run_at, id) >= (from_at, from_id)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      WHERE j.ctid = ANY(ARRAY(SELECT tid FROM c))
    RETURNING j.*
  ),
  claimed AS MATERIALIZED (
    SELECT group_key AS key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key
  ),
  gl AS MATERIALIZED (
    -- Lock: FOR UPDATE on the groups of the claimed jobs IN KEY ORDER (primary-key probes, returned in
    -- key order). Waiting for a group row here holds only job rows no other statement waits for (locked
    -- with SKIP LOCKED, not running yet), and a limited claim holding a group never waits: no deadlock.
    SELECT g.key FROM {{schema}}.job_groups g
     WHERE g.key = ANY(ARRAY(SELECT key FROM claimed))
     ORDER BY g.key
     FOR UPDATE OF g
  ),
  gu AS (
    -- The counters of the rows locked in gl (no wait): they grow by the jobs claimed now.
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k
      FROM claimed c
     WHERE g.key = c.key AND g.key = ANY(ARRAY(SELECT key FROM gl))
  )
  SELECT * FROM up ORDER BY priority, run_at, id
$$;
