-- pg-txkit queue schema, migration 0009: the settles of a batch (complete, fail, extend, release) find
-- their jobs by their primary key, whatever the statistics and however many jobs they settle.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: the worker's completion was one statement, DELETE FROM jobs USING unnest(ids, tokens) WHERE
-- j.id = i.id AND j.lease_token = i.token AND j.state = 'running'. For 100 ids or more the planner
-- (the custom plan the worker's unnamed statement gets, and the generic plan alike) chose a hash join
-- with a bitmap scan of jobs_leases, the partial index of every running job, instead of probing the
-- primary key once per id: the statistics count few running jobs, so reading them all looked cheaper.
-- But claiming a job adds an entry to jobs_leases and completing it leaves that entry behind until
-- vacuum removes it, which it cannot do while any session holds the MVCC horizon back: the scan then
-- visits the heap for every job completed since. Measured (test/integration/queue-settle-plans.test.ts,
-- PostgreSQL 18, 100 jobs settled under a held REPEATABLE READ snapshot, the table ANALYZEd; shared
-- buffers read to find the jobs, below the DELETE or UPDATE): the completion read 15 after 200 jobs
-- completed and 159 after 5,000, growing linearly; the worker's heartbeat (extend), an UPDATE … FROM
-- unnest with the same plan, 19 and 168; the fail and release statements had that join too. Through the
-- functions below, 202 and 202 for each (PostgreSQL 14: 400 and 400, one descent of the primary key per
-- id). With few entries left behind the old plan read fewer (15: the running jobs' pages); 2 buffers
-- per id is the price of a plan that does not grow with them.
--
-- complete_jobs(ids, tokens): that DELETE, and nothing else (the archive and the group steps stay in the
-- worker's statement). Lock: FOR UPDATE (the row lock of DELETE) on each job still running under its
-- lease token, held until the calling statement's transaction ends; a completion whose lease was lost
-- (reaped, re-claimed, cancelled) matches nothing and changes nothing. fail_jobs, extend_leases and
-- release_jobs: the UPDATEs of the worker's fail, extend and release statements, each alone (the group
-- steps stay in the statements); Lock: FOR NO KEY UPDATE (the row lock of an UPDATE that leaves keys
-- alone) on each job still running under its lease token, fenced in the same way. Each returns the rows
-- it wrote, as they are now.
-- Plan: a merge join of one ordered scan of jobs_pkey for the ids (id = ANY(ids), an index condition:
-- from PostgreSQL 17 one descent for ids on the same leaf pages) with the ids and tokens sorted by id,
-- whatever the table's size, its statistics or the number of ids: 2 shared buffers per id in that
-- scan (the job's two versions, pending and running, both in the primary key), against 3 for a nested
-- loop probing the primary key once per id. The state is compared with IS NOT DISTINCT FROM, as
-- complete_take_next does (migration 0002), so that no partial index whose predicate is state =
-- 'running' can serve the scan; sequential scans, bitmap scans, hash joins and nested loops are off for
-- the functions' statements, which leaves that plan as the only one. plan_cache_mode =
-- force_generic_plan: planned once per connection (the plan does not depend on the ids), not at every
-- call.
-- CREATE FUNCTION takes no lock on the tables; the worker's statements call these functions from this
-- version on (a worker of the previous version keeps its own statements, which stay correct).
CREATE FUNCTION {{schema}}.complete_jobs(ids bigint[], tokens uuid[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE plpgsql VOLATILE
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_hashjoin = off
  SET enable_nestloop = off
AS $$
BEGIN
  RETURN QUERY
    DELETE FROM {{schema}}.jobs j
     USING unnest(ids, tokens) AS i(id, token)
     WHERE j.id = ANY(ids) AND j.id = i.id AND j.lease_token = i.token AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.*;
END $$;

-- A failed attempt: retry at now() + the explicit delay, or the job's backoff with full jitter; dead
-- once its attempts are used up (or when final).
CREATE FUNCTION {{schema}}.fail_jobs(ids bigint[], tokens uuid[], errors text[], delays double precision[],
                                     finals boolean[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE plpgsql VOLATILE
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_hashjoin = off
  SET enable_nestloop = off
AS $$
BEGIN
  RETURN QUERY
    UPDATE {{schema}}.jobs j
       SET state = CASE WHEN i.final OR j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
           run_at = CASE WHEN i.final OR j.attempts >= j.max_attempts THEN j.run_at
                    ELSE now() + coalesce(i.delay_ms, {{schema}}.retry_delay_ms(j.attempts, j.backoff_base_ms, j.backoff_cap_ms))
                                 * interval '1 millisecond' END,
           last_error = i.error, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
      FROM unnest(ids, tokens, errors, delays, finals) AS i(id, token, error, delay_ms, final)
     WHERE j.id = ANY(ids) AND j.id = i.id AND j.lease_token = i.token AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.*;
END $$;

-- The heartbeat: the lease runs until now() + lease_ms.
CREATE FUNCTION {{schema}}.extend_leases(ids bigint[], tokens uuid[], lease_ms double precision)
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE plpgsql VOLATILE
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_hashjoin = off
  SET enable_nestloop = off
AS $$
BEGIN
  RETURN QUERY
    UPDATE {{schema}}.jobs j
       SET lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM unnest(ids, tokens) AS i(id, token)
     WHERE j.id = ANY(ids) AND j.id = i.id AND j.lease_token = i.token AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.*;
END $$;

-- Jobs given back by a stopping worker, without charging the attempt (the handler did not fail).
CREATE FUNCTION {{schema}}.release_jobs(ids bigint[], tokens uuid[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE plpgsql VOLATILE
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_hashjoin = off
  SET enable_nestloop = off
AS $$
BEGIN
  RETURN QUERY
    UPDATE {{schema}}.jobs j
       SET state = 'pending', attempts = greatest(j.attempts - 1, 0), run_at = now(),
           lease_token = NULL, lease_expires_at = NULL, updated_at = now()
      FROM unnest(ids, tokens) AS i(id, token)
     WHERE j.id = ANY(ids) AND j.id = i.id AND j.lease_token = i.token AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.*;
END $$;
