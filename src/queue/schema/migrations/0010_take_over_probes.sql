-- pg-txkit queue schema, migration 0010: the completion that takes the next jobs over reads the freed
-- groups' rows in one index scan each time it needs them, not one primary-key search per group.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: complete_take_next (migration 0002, settings of 0006) checked each freed group's count against
-- its limit with a nested loop that searched job_groups' primary key once per group (3 buffers each),
-- and gave the slots back with two more such searches per group (the lock, then the UPDATE joined to
-- it). A burn-down over 1,000 serial groups frees hundreds of groups per completion, and these searches
-- were a fifth of its buffers: in one completion of 500 jobs (auto_explain), the limit check read 1,545
-- buffers for 500 groups and the 153 slots given back 918 (the same check now: 25; the slots' lock: 14
-- to find them). Per job of the whole burn-down (pg_stat_statements, nested
-- statements): with one worker process (bench/queue/serial-statements.mjs, two rounds, the old body in
-- the same rounds, load 6) the take-over statement read 15.6-15.9 -> 12.3-13.1 buffers and ran 26.2-32.5
-- -> 19.6-21.7 µs; with bench/queue's two worker processes, 18.8 -> 15.5 buffers (measured with the
-- decrement below by address, which loses a decrement, see slots; by key, one round: 12.5 buffers).
-- Now the check and the lock read job_groups once each, by key = ANY(a sorted array of the keys), which
-- PostgreSQL 17 and later answer in one index scan that descends again only to reach a later leaf page
-- (before 17, one descent per key, still in one scan node). Same locks, in the same order, same results,
-- but for one gap closed: the slots given back are counted from the jobs actually leased (see short).
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
BEGIN
  -- Lock: FOR UPDATE (row lock of DELETE) on each job still running under its lease token. Fenced by id
  -- + lease_token + state: a completion whose lease was lost (reaped, re-claimed, cancelled) matches
  -- nothing and changes nothing. The state is compared with IS NOT DISTINCT FROM so that the plan
  -- (generic: it cannot see how many ids come) probes the primary key once per id; with '=' it may walk
  -- jobs_leases, every running job, once per id. Done jobs are deleted, or moved to jobs_archive.
  WITH d AS (
    DELETE FROM {{schema}}.jobs j
     USING unnest(ids, tokens) AS i(id, token)
     WHERE j.id = i.id AND j.lease_token = i.token AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.id, j.task, j.payload, j.attempts, j.key, j.last_error, j.created_at, j.progress, j.group_key
  ),
  a AS (
    INSERT INTO {{schema}}.jobs_archive (id, task, payload, state, attempts, key, last_error, created_at, progress)
           SELECT id, task, payload, 'done', attempts, key, last_error, created_at, progress FROM d WHERE archive
  ),
  f AS (SELECT f.group_key, count(*)::int AS k FROM d f WHERE f.group_key IS NOT NULL GROUP BY f.group_key)
  SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM d), coalesce(fa.keys, '{}'), coalesce(fa.ks, '{}')
    INTO done_ids, freed_keys, freed_k
    FROM (SELECT array_agg(group_key ORDER BY group_key) AS keys, array_agg(k ORDER BY group_key) AS ks FROM f) fa;

  -- A new snapshot: the jobs other completions took over meanwhile are seen as taken, not tried.
  RETURN QUERY
  WITH budget AS MATERIALIZED (
    -- No lock. How many of each group's freed slots may be taken over: 'room' in all, the groups in
    -- key order (the arrays are sorted).
    SELECT f.group_key, f.k,
           least(f.k, greatest(0, room - (sum(f.k) OVER (ORDER BY f.o) - f.k)))::int AS take
      FROM unnest(freed_keys, freed_k) WITH ORDINALITY AS f(group_key, k, o)
  ),
  head AS MATERIALIZED (
    -- No lock: the best priority among the ready jobs of these tasks.
    SELECT h.priority FROM {{schema}}.jobs h
     WHERE h.state = 'pending' AND h.run_at <= now() AND h.task = ANY(tasks)
     ORDER BY h.priority, h.run_at, h.id
     LIMIT 1
  ),
  within AS MATERIALIZED (
    -- No lock: the freed groups whose count is within their declared concurrency, as of this snapshot
    -- (see successors). One scan of job_groups' primary key for all of them (the array is sorted).
    SELECT g.key FROM {{schema}}.job_groups g
     WHERE g.key = ANY(freed_keys)
       AND g.running <= coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int,
                                 2147483647)
  ),
  successors AS MATERIALIZED (
    -- For each group that had k jobs completed, its next 'take' ready jobs of 'tasks' in claim order,
    -- when the group's count is within its declared concurrency (as of this snapshot; after a limit was
    -- lowered, slots go back until the count is within it again) and no ready job of these tasks has a
    -- better priority (otherwise the slot goes back and the claims choose). The group's row is neither
    -- locked nor written: k jobs out, at most k in.
    -- Lock: FOR UPDATE SKIP LOCKED on those jobs, re-checked on their newest version (still pending and
    -- ready); one locked by a claim or another completion is skipped, never waited for.
    SELECT w.tid, f.group_key FROM budget f
     CROSS JOIN LATERAL (
       SELECT n.ctid AS tid FROM {{schema}}.jobs n
        WHERE coalesce(n.group_key, '') = f.group_key AND n.state = 'pending' AND n.run_at <= now()
          AND n.task = ANY(tasks) AND n.priority <= coalesce((SELECT priority FROM head), n.priority)
        ORDER BY n.priority, n.run_at, n.id
        LIMIT f.take
          FOR UPDATE SKIP LOCKED
     ) w
     WHERE f.take > 0 AND f.group_key IN (SELECT key FROM within)
  ),
  taken AS (
    -- The rows locked in 'successors' (no wait), fetched by address (see ClaimTarget), leased as a
    -- claim leases them.
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
     WHERE j.ctid = ANY(ARRAY(SELECT tid FROM successors))
    RETURNING j.*
  ),
  short AS MATERIALIZED (
    -- Per group, the slots not taken over. They go back in the steps after it, with the wake-up
    -- (freeSlots in settle-steps.ts). Counted from the jobs 'taken' leased, not from the rows
    -- 'successors' locked: a job changed after this statement's snapshot and still ready is locked in
    -- its newest version, which the UPDATE by address under this snapshot does not see (it stays
    -- pending, its lock released at the end of the statement); its slot goes back too.
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
