-- pg-txkit queue schema, migration 0002: enqueue from SQL.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.

-- Whether the payload was validated by the task's schema when it was enqueued. enqueue() and
-- enqueueMany() validate before inserting; a job enqueued from SQL (below: a trigger, a migration,
-- another language) has not been, so the worker validates it when the job runs and fails the job (dead,
-- with the schema's issues as its error) when it does not match. A constant default: no table rewrite
-- (ACCESS EXCLUSIVE on jobs for the catalog change only, inside migrate()'s short transaction).
ALTER TABLE {{schema}}.jobs ADD COLUMN payload_checked boolean NOT NULL DEFAULT true;

-- Enqueues one job from SQL, with enqueue()'s rules: a live (pending or running) job of the task with
-- the same key is returned instead of a duplicate; the group's row is created if missing (its limits
-- apply when the job is claimed); priority (lower runs first) and run_at (default now()); the jobs
-- table's statement trigger wakes the workers at COMMIT. Returns the job's id. The payload is checked by
-- the task's schema when a worker runs the job (payload_checked = false). max_attempts and the backoff
-- take the table's defaults (5 attempts, 1 s to 1 h) unless given: the queue's own options are not
-- known to the database.
-- Locks: ROW EXCLUSIVE on job_groups (a missing group's row, ON CONFLICT DO NOTHING: no lock on an
-- existing row) and on jobs; with a key, the partial unique index jobs_key by speculative insertion
-- (waits for a concurrent uncommitted insert of the same key, then reads the winner). A keyed job that
-- ended between the insert and the read is retried, at most 5 times, each statement with a new snapshot
-- (read committed; under repeatable read the snapshot cannot move and the function raises).
CREATE FUNCTION {{schema}}.enqueue(
    task text, payload jsonb, key text DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    priority integer DEFAULT 0, group_key text DEFAULT NULL, max_attempts integer DEFAULT 5,
    backoff_base_ms integer DEFAULT 1000, backoff_cap_ms integer DEFAULT 3600000)
  RETURNS bigint
  LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
  job_id bigint;
BEGIN
  IF enqueue.task IS NULL OR enqueue.task = '' THEN
    RAISE EXCEPTION 'enqueue: task must be a non-empty text' USING ERRCODE = '22023';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'enqueue: payload must not be NULL (use ''{}''::jsonb)' USING ERRCODE = '22023';
  END IF;
  IF enqueue.group_key IS NOT NULL THEN
    INSERT INTO {{schema}}.job_groups (key) VALUES (enqueue.group_key) ON CONFLICT (key) DO NOTHING;
  END IF;
  FOR attempt IN 1..5 LOOP
    INSERT INTO {{schema}}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                      backoff_cap_ms, key, group_key, payload_checked)
    VALUES (enqueue.task, enqueue.payload, enqueue.priority, coalesce(enqueue.run_at, now()), enqueue.max_attempts,
            enqueue.backoff_base_ms, enqueue.backoff_cap_ms, enqueue.key, enqueue.group_key, false)
    ON CONFLICT (task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
    RETURNING j.id INTO job_id;
    IF job_id IS NOT NULL THEN
      RETURN job_id;
    END IF;
    SELECT j.id INTO job_id FROM {{schema}}.jobs j
     WHERE j.task = enqueue.task AND j.key = enqueue.key AND j.state IN ('pending', 'running');
    IF job_id IS NOT NULL THEN
      RETURN job_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'enqueue: the job holding key % of task % ended while this one was inserted, 5 times',
    enqueue.key, enqueue.task USING ERRCODE = '40001';
END $$;

-- complete_take_next as in 0001, its jobs taken over now carrying payload_checked (the 6th element of a
-- job's extras, as the claim statements return it), so that a job enqueued from SQL and taken over by a
-- completion is validated like a claimed one. CREATE OR REPLACE takes no lock on the tables.
CREATE OR REPLACE FUNCTION {{schema}}.complete_take_next(
    ids bigint[], tokens uuid[], lease_ms double precision, tasks text[], limits jsonb, room integer,
    archive boolean)
  RETURNS TABLE (done text[], woke bigint, heads text, task_names json, payloads json, extras json)
  LANGUAGE plpgsql VOLATILE
  SET plan_cache_mode = force_generic_plan
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
  successors AS MATERIALIZED (
    -- For each group that had k jobs completed, its next 'take' ready jobs of 'tasks' in claim order,
    -- when the group's count is within its declared concurrency (as of this snapshot; after a limit was
    -- lowered, slots go back until the count is within it again) and no ready job of these tasks has a
    -- better priority (otherwise the slot goes back and the claims choose). The group's row is neither
    -- locked nor written: k jobs out, at most k in.
    -- Lock: FOR UPDATE SKIP LOCKED on those jobs, re-checked on their newest version (still pending and
    -- ready); one locked by a claim or another completion is skipped, never waited for.
    SELECT w.tid, f.group_key FROM budget f
      JOIN {{schema}}.job_groups g ON g.key = f.group_key
     CROSS JOIN LATERAL (
       SELECT n.ctid AS tid FROM {{schema}}.jobs n
        WHERE coalesce(n.group_key, '') = f.group_key AND n.state = 'pending' AND n.run_at <= now()
          AND n.task = ANY(tasks) AND n.priority <= coalesce((SELECT priority FROM head), n.priority)
        ORDER BY n.priority, n.run_at, n.id
        LIMIT f.take
          FOR UPDATE SKIP LOCKED
     ) w
     WHERE f.take > 0
       AND g.running <= coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int,
                                 2147483647)
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
    -- Per group, the slots not taken over (every row locked in 'successors' is leased in 'taken'). They
    -- go back in the steps after it, with the wake-up (freeSlots in settle-steps.ts).
    SELECT f.group_key, f.k - coalesce(c.k, 0) AS k FROM budget f
      LEFT JOIN (SELECT s.group_key, count(*)::int AS k FROM successors s GROUP BY s.group_key) c
        ON c.group_key = f.group_key
     WHERE f.k > coalesce(c.k, 0)
  ),
      slot_locks AS MATERIALIZED (
        SELECT g.key, d.k FROM {{schema}}.job_groups g
          JOIN short d ON g.key = d.group_key
         ORDER BY g.key
         FOR UPDATE OF g
      ),
      slots AS (
        UPDATE {{schema}}.job_groups g SET running = g.running - l.k
          FROM slot_locks l
         WHERE g.key = l.key
        RETURNING g.key
      ),
      slot_wake AS (
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
