-- pg-txkit queue schema, migration 0008: a completion finds its jobs by their primary key, whatever the
-- statistics and however many jobs it completes.
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
-- PostgreSQL 18, a completion of 100 jobs under a held REPEATABLE READ snapshot): the statement read 215
-- shared buffers after 200 jobs completed and 359 after 5,000 (200 of them the DELETE's own), growing
-- linearly (one more buffer per 33 jobs completed; the table ANALYZEd first); through
-- complete_jobs, 402 and 402 (PostgreSQL 14: 600 and 600, one descent of the primary key per id).
--
-- complete_jobs(ids, tokens): that DELETE, and nothing else (the archive and the group steps stay in the
-- worker's statement). Lock: FOR UPDATE (the row lock of DELETE) on each job still running under its
-- lease token, held until the calling statement's transaction ends; a completion whose lease was lost
-- (reaped, re-claimed, cancelled) matches nothing and changes nothing.
-- Plan: a merge join of one ordered scan of jobs_pkey for the ids (id = ANY(ids), an index condition:
-- from PostgreSQL 17 one descent for ids on the same leaf pages) with the ids and tokens sorted by id,
-- whatever the table's size, its statistics or the number of ids: 2 shared buffers per id in that
-- scan (the job's two versions, pending and running, both in the primary key), against 3 for a nested
-- loop probing the primary key once per id. The state is compared with IS NOT DISTINCT FROM, as
-- complete_take_next does (migration 0002), so that no partial index whose predicate is state =
-- 'running' can serve the scan; sequential scans, bitmap scans, hash joins and nested loops are off for
-- the function's statements, which leaves that plan as the only one. plan_cache_mode =
-- force_generic_plan: planned once per connection (the plan does not depend on the ids), not at every
-- call.
-- CREATE FUNCTION takes no lock on the tables.
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
