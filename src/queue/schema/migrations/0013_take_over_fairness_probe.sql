-- pg-txkit queue schema, migration 0013: the completion that takes the next jobs over checks their
-- priority without walking the front of jobs_claimable, and finds its completed jobs as complete_jobs
-- does.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: the completion that takes over a group's next jobs (every job of a serial group after its first,
-- in a burn-down) had two costs that grew with the jobs claimed before it, and had nothing to do with
-- groups, and a third that most queues need not pay:
-- - The fairness check (a job is taken over only when no ready job of the same tasks has a better
--   priority) read the head of the claim order: the first ready job of jobs_claimable, in order. Every job
--   claimed since the table was last vacuumed leaves its entry at the front of that index (marked dead by
--   the first scan that passes it, or not at all while a snapshot holds the horizon back, when each one
--   also costs a visit of its heap page), and the probe stepped over all of them, at every completion.
--   Now it asks, for each distinct priority p among the jobs found, whether a ready job of a better
--   (smaller) priority exists: a search of jobs_claimable for priority < p, which stops at the first entry
--   of priority p or more, so the entries of the priority in use are never walked (one descent and one
--   leaf page). Same rule: a job of priority p is taken over only when no ready job of these tasks has a
--   priority below p, which is what "p is the head's priority" meant (no ready job has a priority below
--   the head's). A job found and locked whose priority fails the check is not taken: its lock ends with
--   the statement and its slot goes back, as before (the old body skipped it in the search; a group's
--   jobs are in priority order, so it found none of that group either).
-- - The DELETE of the completed jobs probed the primary key once per id (a nested loop, 3.6 shared
--   buffers per job in a burn-down); complete_jobs (migration 0009), which the plain completion calls,
--   reads it in one ordered scan (2 per job, whatever the statistics). Same lock (FOR UPDATE, the row lock
--   of DELETE), same fence (id + lease token + state running).
-- - Its check of the freed groups' counts against their declared concurrency read the declaration
--   from the limits (jsonb) for every group, though most queues declare only a default: it is read once
--   now, unless some group has a declaration of its own.
-- Measured: one take-over while a snapshot holds the horizon back (test/integration/
-- queue-take-over-reads.test.ts, the call's shared buffers) reads 17 with 200 claimed jobs' entries in
-- front of its group's jobs and 22 with 5,000; 0010's body 22 and 167 (PostgreSQL 18 and 14). Without a
-- held snapshot: one connection, the two bodies interleaved on one table of 1,200 serial groups
-- (bench/queue/take-over-variants.mjs, three runs) 25.2, 22.8, 22.8 µs of the backend's CPU per job
-- against 25.4, 24.6, 23.9 for 0010's, each call 0.95–0.97 of the time; in a burn-down of 50,000 jobs over
-- 1,000 serial groups with two workers (bench/queue/serial-statements.mjs, four interleaved rounds) the
-- server's CPU per job is the same as with 0012 (26.6–28.4 µs against 26.4–27.4), with 19.1–19.4 shared
-- buffers per job in the completion against 21.7–21.9.
-- Each step says which lock it takes.
-- CREATE OR REPLACE FUNCTION takes no lock on the tables; a completion running meanwhile finishes on the
-- old body, the next one uses the new.

CREATE OR REPLACE FUNCTION {{schema}}.complete_take_next(
    ids bigint[], tokens uuid[], lease_ms double precision, tasks text[], limits jsonb, room integer,
    archive boolean)
  RETURNS TABLE (done text[], woke bigint, heads text, task_names json, payloads json, extras json)
  LANGUAGE plpgsql VOLATILE
  -- plan_cache_mode = force_generic_plan: planned once per connection (migration 0001, step 10).
  -- enable_seqscan = off: as migration 0006 set it (CREATE OR REPLACE replaces the function's settings
  -- with these).
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
AS $$
DECLARE
  done_ids text[];
  freed_keys text[];
  freed_k integer[];
  group_limits boolean;
  default_limit integer;
BEGIN
  -- Lock: FOR UPDATE (row lock of DELETE) on each job still running under its lease token, through
  -- complete_jobs (migration 0009: one ordered scan of the primary key for the ids). Fenced by id +
  -- lease_token + state: a completion whose lease was lost (reaped, re-claimed, cancelled) matches
  -- nothing and changes nothing. Done jobs are deleted, or moved to jobs_archive.
  WITH d AS MATERIALIZED (
    SELECT j.id, j.task, j.payload, j.attempts, j.key, j.last_error, j.created_at, j.progress, j.group_key
      FROM {{schema}}.complete_jobs(ids, tokens) j
  ),
  a AS (
    INSERT INTO {{schema}}.jobs_archive (id, task, payload, state, attempts, key, last_error, created_at, progress)
           SELECT id, task, payload, 'done', attempts, key, last_error, created_at, progress FROM d WHERE archive
  ),
  f AS (SELECT f.group_key, count(*)::int AS k FROM d f WHERE f.group_key IS NOT NULL GROUP BY f.group_key)
  SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM d), coalesce(fa.keys, '{}'), coalesce(fa.ks, '{}')
    INTO done_ids, freed_keys, freed_k
    FROM (SELECT array_agg(group_key ORDER BY group_key) AS keys, array_agg(k ORDER BY group_key) AS ks FROM f) fa;

  -- The declared concurrency: the default's, unless some group has a declaration of its own (then each
  -- group's is looked up in 'within', row by row).
  group_limits := coalesce(limits->'groups', '{}'::jsonb) <> '{}'::jsonb;
  default_limit := coalesce((limits->'default'->>'concurrency')::int, 2147483647);

  -- A new snapshot: the jobs other completions took over meanwhile are seen as taken, not tried.
  RETURN QUERY
  WITH budget AS MATERIALIZED (
    -- No lock. How many of each group's freed slots may be taken over: 'room' in all, the groups in
    -- key order (the arrays are sorted).
    SELECT f.group_key, f.k,
           least(f.k, greatest(0, room - (sum(f.k) OVER (ORDER BY f.o) - f.k)))::int AS take
      FROM unnest(freed_keys, freed_k) WITH ORDINALITY AS f(group_key, k, o)
  ),
  within AS MATERIALIZED (
    -- No lock: the freed groups whose count is within their declared concurrency, as of this snapshot
    -- (see successors). One scan of job_groups' primary key for all of them (the array is sorted).
    SELECT g.key FROM {{schema}}.job_groups g
     WHERE g.key = ANY(freed_keys)
       AND g.running <= CASE WHEN group_limits
                             THEN coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int,
                                           2147483647)
                             ELSE default_limit END
  ),
  successors AS MATERIALIZED (
    -- For each group that had k jobs completed, its next 'take' ready jobs of 'tasks' in claim order,
    -- when the group's count is within its declared concurrency (as of this snapshot; after a limit was
    -- lowered, slots go back until the count is within it again). The group's row is neither locked nor
    -- written: k jobs out, at most k in.
    -- Lock: FOR UPDATE SKIP LOCKED on those jobs, re-checked on their newest version (still pending and
    -- ready); one locked by a claim or another completion is skipped, never waited for.
    SELECT w.tid, w.priority, f.group_key FROM budget f
     CROSS JOIN LATERAL (
       SELECT n.ctid AS tid, n.priority FROM {{schema}}.jobs n
        WHERE coalesce(n.group_key, '') = f.group_key AND n.state = 'pending' AND n.run_at <= now()
          AND n.task = ANY(tasks)
        ORDER BY n.priority, n.run_at, n.id
        LIMIT f.take
          FOR UPDATE SKIP LOCKED
     ) w
     WHERE f.take > 0 AND f.group_key IN (SELECT key FROM within)
  ),
  fair AS MATERIALIZED (
    -- No lock: the priorities of those jobs that no ready job of these tasks beats (as of this snapshot).
    -- A job of another priority is not taken (its lock ends with this statement): its slot goes back and
    -- the claims choose, in claim order. Per distinct priority p, a search of jobs_claimable for
    -- priority < p: it stops at the first entry of priority p or more, so it never walks the entries the
    -- jobs of priority p left behind at the front of the index.
    SELECT p.priority FROM (SELECT DISTINCT s.priority FROM successors s) p
     WHERE (SELECT h.priority FROM {{schema}}.jobs h
             WHERE h.state = 'pending' AND h.priority < p.priority AND h.run_at <= now() AND h.task = ANY(tasks)
             ORDER BY h.priority, h.run_at, h.id
             LIMIT 1) IS NULL
  ),
  taken AS (
    -- The rows locked in 'successors' whose priority passed 'fair' (no wait), fetched by address (see
    -- ClaimTarget), leased as a claim leases them.
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
     WHERE j.ctid = ANY(ARRAY(SELECT s.tid FROM successors s WHERE s.priority IN (SELECT priority FROM fair)))
    RETURNING j.*
  ),
  short AS MATERIALIZED (
    -- Per group, the slots not taken over. They go back in the steps after it, with the wake-up
    -- (freeSlots in settle-steps.ts). Counted from the jobs 'taken' leased, not from the rows
    -- 'successors' locked: a job changed after this statement's snapshot and still ready is locked in
    -- its newest version, which the UPDATE by address under this snapshot does not see (it stays
    -- pending, its lock released at the end of the statement); its slot goes back too, as does the slot
    -- of a job locked there whose priority 'fair' did not pass.
    SELECT f.group_key, f.k - coalesce(c.k, 0) AS k FROM budget f
      LEFT JOIN (SELECT t.group_key, count(*)::int AS k FROM taken t GROUP BY t.group_key) c
        ON c.group_key = f.group_key
     WHERE f.k > coalesce(c.k, 0)
  ),
  slot_locks AS MATERIALIZED (
    -- Lock: FOR UPDATE on the rows of the groups with slots to give back, IN KEY ORDER (every statement
    -- that takes several group locks takes them sorted: no deadlock), waiting for a claim or settle that
    -- holds one. One scan of the primary key for all of them (the array is sorted).
    SELECT g.key, d.k FROM {{schema}}.job_groups g
      JOIN short d ON d.group_key = g.key
     WHERE g.key = ANY(ARRAY(SELECT s.group_key FROM short s ORDER BY s.group_key))
     ORDER BY g.key
       FOR UPDATE OF g
  ),
  slots AS (
    -- The rows locked in slot_locks (no wait): their counters drop by the slots given back. Found by
    -- key, NOT by the address the lock step saw: a row another claim or settle changed after this
    -- statement's snapshot (the lock waited for it) is locked in its newest version, which a scan by
    -- address under this snapshot does not see, and its decrement would be lost; found by key, the
    -- UPDATE follows the row to its newest version (READ COMMITTED), the one locked above.
    UPDATE {{schema}}.job_groups g SET running = g.running - l.k
      FROM slot_locks l
     WHERE g.key = ANY(ARRAY(SELECT key FROM slot_locks)) AND g.key = l.key
    RETURNING g.key
  ),
  slot_wake AS (
    -- No lock: a NOTIFY when a group given a slot back has ready jobs (the other workers may claim them).
    SELECT pg_notify({{channel}}, '') AS woke
     WHERE EXISTS (SELECT 1 FROM slots s WHERE EXISTS (
       SELECT 1 FROM {{schema}}.jobs p WHERE coalesce(p.group_key, '') = s.key AND p.state = 'pending' AND p.run_at <= now()))
  )

  -- One row: the ids completed, the wake-up, and the jobs taken over in claim order, as a claim returns
  -- them (see claimedAggregates).
  SELECT done_ids, (SELECT count(*) FROM slot_wake), string_agg(concat_ws(',', j.id, j.priority, floor(extract(epoch FROM j.run_at) * 1000)::bigint, j.attempts, j.max_attempts, j.lease_token,
  floor(extract(epoch FROM j.lease_expires_at) * 1000)::bigint, floor(extract(epoch FROM j.created_at) * 1000)::bigint), ';') AS heads, json_agg(j.task) AS tasks,
  json_agg(j.payload) AS payloads, json_agg(CASE WHEN j.key IS NOT NULL OR j.last_error IS NOT NULL OR j.progress IS NOT NULL OR j.group_key IS NOT NULL
  OR j.trace_context IS NOT NULL OR NOT j.payload_checked
  THEN json_build_array(j.key, j.last_error, j.progress, j.group_key, j.trace_context, NOT j.payload_checked) END) AS extras
    FROM (SELECT * FROM taken ORDER BY priority, run_at, id) j;
END $$;
