-- pg-txkit queue schema, migration 0001 (the schema of version 0.2.0, the first released).
--
-- FROZEN: never edit this file. A migration, once released, is history: a schema migrated with it must
-- stay what this text made it. A change to the schema is a new file, 0002_*.sql, and migrate() refuses
-- to run against a schema whose recorded checksum of this file differs from the shipped one.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key, so two
-- processes starting at once never apply it twice. '{{schema}}' is replaced by the quoted schema name
-- and '{{channel}}' by the quoted NOTIFY channel literal before it runs.
--
-- It is the eleven steps the schema was developed in, in their order, each with its own notes; nothing
-- was published before them, so they are one migration.

-- ===== step 1 (001_jobs) =====
-- pg-txkit queue, migration 1: the jobs table, its indexes, the retry-delay function and the
-- wake-up trigger. '{{schema}}' is replaced by the quoted schema name and '{{channel}}' by the quoted
-- NOTIFY channel literal before this runs (inside migrate()'s transaction, under
-- pg_advisory_xact_lock, so two processes starting at once never apply it twice).

-- The hot table: only pending, running and dead jobs live here. A completed job is deleted (or moved
-- to jobs_archive when the queue is configured with 'archive: true'), so the table and its indexes
-- stay small and the claim query never wades through finished rows.
CREATE TABLE {{schema}}.jobs (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task             text        NOT NULL,
  payload          jsonb       NOT NULL,
  state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'dead')),
  priority         integer     NOT NULL DEFAULT 0,
  run_at           timestamptz NOT NULL DEFAULT now(),
  attempts         integer     NOT NULL DEFAULT 0,
  max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
  backoff_base_ms  integer     NOT NULL DEFAULT 1000,
  backoff_cap_ms   integer     NOT NULL DEFAULT 3600000,
  key              text,
  lease_token      uuid,
  lease_expires_at timestamptz,
  last_error       text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  -- A running job always has a lease; no other state has one.
  CONSTRAINT jobs_lease_iff_running CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Partial index for claimable rows, in the claim's ORDER BY: the claim walks it in order and stops
-- after LIMIT unlocked rows. Running and dead rows are not in it, so they cost the claim nothing.
CREATE INDEX jobs_claimable ON {{schema}}.jobs (priority, run_at, id) WHERE state = 'pending';

-- The reaper's index: running jobs by lease expiry.
CREATE INDEX jobs_leases ON {{schema}}.jobs (lease_expires_at) WHERE state = 'running';

-- Unique job keys, enforced only while a job is live (pending or running): once it is done (deleted)
-- or dead, the same key can be enqueued again. enqueue() targets it with ON CONFLICT … DO NOTHING.
CREATE UNIQUE INDEX jobs_key ON {{schema}}.jobs (task, key)
  WHERE key IS NOT NULL AND state IN ('pending', 'running');

-- Dead jobs, for stats and redrive.
CREATE INDEX jobs_dead ON {{schema}}.jobs (task, id) WHERE state = 'dead';

-- Completed (and cancelled) jobs, only when the queue is configured with 'archive: true'.
CREATE TABLE {{schema}}.jobs_archive (
  id          bigint      PRIMARY KEY,
  task        text        NOT NULL,
  payload     jsonb       NOT NULL,
  state       text        NOT NULL CHECK (state IN ('done', 'cancelled')),
  attempts    integer     NOT NULL,
  key         text,
  last_error  text,
  created_at  timestamptz NOT NULL,
  finished_at timestamptz NOT NULL DEFAULT now()
);

-- Exponential backoff with full jitter and a cap: a uniformly random delay in
-- [0, min(cap, base * 2^(attempts - 1))) milliseconds. One definition used by fail() and the reaper.
CREATE FUNCTION {{schema}}.retry_delay_ms(attempts integer, base_ms integer, cap_ms integer)
  RETURNS double precision LANGUAGE sql VOLATILE PARALLEL SAFE
  AS $$ SELECT random() * least(cap_ms::double precision, base_ms * power(2::double precision, greatest(attempts - 1, 0))) $$;

-- Wake-up: at most ONE notification per INSERT statement (a statement-level trigger, not a row
-- trigger), and only when the statement inserted a job that can run now. NOTIFY is transactional:
-- workers hear it when the enqueuing transaction commits, never for a rolled-back outbox insert.
CREATE FUNCTION {{schema}}.notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM inserted WHERE run_at <= now()) THEN
    PERFORM pg_notify({{channel}}, '');
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify AFTER INSERT ON {{schema}}.jobs
  REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.notify_jobs();

-- ===== step 2 (002_claim_function) =====
-- pg-txkit queue, migration 2: the claim statement as a function with a pinned plan, and autovacuum
-- settings for a hot queue table. Runs inside migrate()'s transaction under pg_advisory_xact_lock.

-- Claim up to n runnable jobs: ONE statement (a MATERIALIZED CTE with FOR UPDATE SKIP LOCKED, then
-- UPDATE … RETURNING), called as 'SELECT * FROM claim_jobs(n, lease_ms, tasks)'.
-- Locks: FOR UPDATE row locks on the chosen pending rows, SKIP LOCKED; the UPDATE keeps them until the
-- calling autocommit statement ends (microseconds). After that the lease (lease_token +
-- lease_expires_at) is what marks a job as taken; no lock or session outlives the statement.
-- Plan choice:
-- - MATERIALIZED: the CTE is evaluated exactly once, so LIMIT and the row locks apply to one fixed
--   set of ids. Without it the planner may inline the subquery into the UPDATE's join and evaluate it
--   again (e.g. on the inner side of a nested loop, or on an EvalPlanQual recheck), locking and
--   claiming more rows than LIMIT, or the same row twice.
-- - SKIP LOCKED: concurrent claimers do not queue behind each other's row locks (plain FOR UPDATE
--   would serialize every worker on the head of the queue); each takes the next unlocked rows. A row
--   another claimer locked but has not committed is skipped, never claimed twice: after that commit
--   it is 'running' and no longer matches.
-- - The partial index jobs_claimable (priority, run_at, id) WHERE state = 'pending' matches both the
--   WHERE and the ORDER BY: an index scan in order that stops after n unlocked rows, never touching
--   running or dead rows (and done rows are deleted), so a claim costs O(n), not O(backlog).
-- - enable_sort = off, for this function only: with stale statistics (a queue table grows from empty
--   to a large backlog faster than autovacuum analyzes it) the planner estimates "one row" and picks a
--   bitmap scan + sort of EVERY pending job, an O(backlog) claim (measured: 4 ms at 16k pending instead
--   of 0.1 ms). Disabling sorts leaves the ordered index scan as the only cheap plan, whatever the stats.
-- - attempts is counted here, at claim, so a worker that dies mid-job has used an attempt.
CREATE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT id FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  )
  UPDATE {{schema}}.jobs j
     SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
    FROM c
   WHERE j.id = c.id
  RETURNING j.*
$$;

-- A queue table churns: every job is inserted, updated at least twice and deleted. Vacuum and analyze
-- it after 2% of its rows changed instead of the default 20%/10%, so dead tuples (which every claim's
-- index scan must step over) are removed early and the statistics follow the backlog.
-- (ALTER TABLE … SET takes SHARE UPDATE EXCLUSIVE: it does not block claims and settles.)
ALTER TABLE {{schema}}.jobs SET (
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_insert_scale_factor = 0.02
);

-- ===== step 3 (003_group_limits) =====
-- pg-txkit queue, migration 3: job groups (a key given at enqueue), per-group concurrency and rate
-- limits and per-task rate limits, enforced in the claim statement. Runs inside migrate()'s transaction
-- under pg_advisory_xact_lock. On an existing queue: ADD COLUMN without a default is a catalog change,
-- but it takes ACCESS EXCLUSIVE on jobs until migrate() commits (claims and settles wait that long;
-- the index build below scans the table once while it is held).

-- The group of a job (NULL: no group, no limit, the claim's fast path).
ALTER TABLE {{schema}}.jobs ADD COLUMN group_key text;

-- The pending jobs of one group (and, under NULL, the ungrouped ones), in claim order: used when the
-- head of the queue is taken by jobs of full groups, to find the jobs of the groups that still have
-- room, and the ungrouped jobs, without walking the full ones. A job is in it while pending: one more
-- index entry at enqueue (and at a retry); the claim's UPDATE leaves it (running rows are not in it).
-- Keyed by coalesce(group_key, ''): a group key is never empty, and an equality lets the planner walk
-- the ungrouped jobs in claim order ('IS NULL' would not give it the order).
CREATE INDEX jobs_group_ready ON {{schema}}.jobs ((coalesce(group_key, '')), priority, run_at, id)
  WHERE state = 'pending';

-- One row per group key ever enqueued (created by enqueue, ON CONFLICT DO NOTHING).
-- running: the number of jobs of the group in state 'running' (leased), maintained in the SAME
--   statement that moves a job into running (the claim) or out of it (complete, fail, release, reap,
--   cancel), always under this row's lock. The claim reads it under FOR UPDATE, which in READ COMMITTED
--   returns the newest committed version and holds it until the claim commits: no other claim can read
--   the counter between this claim's check and its increment, so the limit holds by construction. (A
--   count(*) of running jobs after locking the group would NOT: in READ COMMITTED the statement's
--   snapshot is taken before the lock is granted, so it misses a claim committed meanwhile.)
-- rate_times: the claim times within the current rate window (a sliding log, oldest first, at most
--   the limit's length): at most 'limit' claims in ANY interval of 'per'.
-- fillfactor 50: every claim and settle of a group updates its row; the free half of each page keeps
-- those updates HOT (no index entry, pruned in place) between two autovacuum runs.
CREATE TABLE {{schema}}.job_groups (
  key        text PRIMARY KEY,
  running    integer NOT NULL DEFAULT 0,
  rate_times timestamptz[] NOT NULL DEFAULT '{}'
) WITH (fillfactor = 50);

-- The rate log of each rate-limited task (created by the claim the first time).
CREATE TABLE {{schema}}.task_rates (
  task       text PRIMARY KEY,
  rate_times timestamptz[] NOT NULL DEFAULT '{}'
) WITH (fillfactor = 50);

-- The plain claim (no limits configured on the claiming queue) now keeps the group counters true:
-- a grouped job it claims counts as running in its group.
-- Locks: as in migration 2 (FOR UPDATE SKIP LOCKED on the chosen pending rows), then FOR UPDATE on the
-- groups of the claimed jobs IN KEY ORDER (every statement that takes several group locks takes them
-- sorted: no deadlock between two claims or settles sharing groups), then the counter UPDATE on those
-- locked rows. Waiting for a group row here holds only job rows no other statement waits for (they
-- were locked with SKIP LOCKED and are not running yet). With no grouped job claimed, the group steps
-- find an empty key array: an index probe of nothing.
CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT id FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM c
     WHERE j.id = c.id
    RETURNING j.*
  ),
  gl AS MATERIALIZED (
    SELECT g.key FROM {{schema}}.job_groups g
     WHERE g.key = ANY(ARRAY(SELECT DISTINCT group_key FROM up WHERE group_key IS NOT NULL))
     ORDER BY g.key
     FOR UPDATE
  ),
  gu AS (
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key AND g.key IN (SELECT key FROM gl)
  )
  SELECT * FROM up
$$;

-- The limited claim: up to n ready jobs of 'tasks' such that no group exceeds its concurrency or rate
-- limit and no rated task its rate limit, whatever other claims run at the same time. 'limits' is the
-- claiming queue's declaration: {"default": L, "groups": {key: L}, "tasks": {task: {"limit", "perMs"}}}
-- with L = {"concurrency"?, "rate"?: {"limit", "perMs"}}. Returns the claimed jobs, and one extra row
-- (job NULL) with wait_ms when a rate window stopped it: how long until the earliest one frees a slot,
-- so a worker sleeps that long instead of polling.
-- One plpgsql call inside the caller's autocommit statement: every lock below is held until it ends.
CREATE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision)
  LANGUAGE plpgsql VOLATILE
  -- enable_sort = off: as for claim_jobs, the ordered index scans whatever the statistics.
  -- plan_cache_mode = force_generic_plan: the statements below are planned once per connection, not
  -- at every call (planning them took ~5 ms, most of a claim's time; custom plans gain nothing here:
  -- the plan shape is fixed by the indexes).
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  -- How far one pass looks in claim order.
  budget constant integer := n * 2 + 32;
  rated text[] := ARRAY(
    SELECT t FROM jsonb_object_keys(coalesce(limits->'tasks', '{}'::jsonb)) AS t WHERE t = ANY(tasks) ORDER BY t);
  want integer := n;
  got integer := 0;
  k integer;
  cut_p integer;
  cut_r timestamptz;
  cut_id bigint;
BEGIN
  IF cardinality(rated) > 0 THEN
    -- Lock: ROW EXCLUSIVE on task_rates. Creates the rate rows of the rated tasks once; ON CONFLICT DO
    -- NOTHING takes no lock on a row that exists. Sorted, so two first claims never deadlock.
    INSERT INTO {{schema}}.task_rates (task) SELECT t FROM unnest(rated) AS t ORDER BY t ON CONFLICT DO NOTHING;
  END IF;
  -- Pass 0 looks at the first 'budget' ready jobs in claim order. Pass 1 runs only when pass 0 came back
  -- short AND there were more ready jobs than it looked at (a long run of jobs of full groups at the
  -- head): it looks at the next 'budget' jobs and at the first ready jobs of up to 'want' groups with
  -- room, found group by group, so jobs over their limit do not block the groups behind them. Each pass
  -- is one statement with a fresh snapshot; the locks of pass 0 are held through pass 1 (same
  -- transaction), and its counters are already updated.
  FOR pass IN 0..1 LOOP
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  cgroups AS MATERIALIZED (
    -- The groups of the candidates, each with its first position in claim order. All of them, not the
    -- first n: a claim running at the same time has the same head window and locks its first groups;
    -- this one skips those and takes the next ones (see locked_groups).
    SELECT c.group_key AS key, min(c.pos) AS ord FROM cand c WHERE c.group_key IS NOT NULL
     GROUP BY c.group_key
  ),
  gcfg AS MATERIALIZED (
    SELECT k.key, k.ord,
           coalesce((l.cfg->>'concurrency')::int, 2147483647) AS conc,
           (l.cfg->'rate'->>'limit')::int AS rl,
           (l.cfg->'rate'->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM cgroups k, LATERAL (SELECT coalesce(limits->'groups'->k.key, limits->'default', '{}'::jsonb) AS cfg) l
  ),
  locked_groups AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the candidate groups that have room. In READ COMMITTED the row
    -- locked is the NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so
    -- 'running' and 'rate_times' below are exact, and stay so until this statement ends: another claim
    -- skips a group locked here, a settle's decrement waits for it. SKIP LOCKED: a group being claimed
    -- or settled right now is left to the next claim; a claim never waits, so it can never be part of a
    -- deadlock, whatever order it locks groups in. The first n groups with room in claim order that no
    -- other statement holds (a claim of n jobs needs at most n): LIMIT stops the locking there, so two
    -- claims sharing a head window split its groups instead of the second one coming back empty.
    SELECT g.key, g.running, g.rate_times, c.conc, c.rl, c.per
      FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM cgroups)) -- primary-key probes, never a scan of every group
       AND g.running < c.conc
       AND (c.rl IS NULL OR cardinality(g.rate_times) < c.rl OR g.rate_times[1] <= now() - c.per)
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  groom AS MATERIALIZED (
    -- Room in each locked group: its free slots, and its free places in the rate window.
    SELECT lg.key, lg.rl, lg.per, v.valid,
           least(lg.conc - lg.running,
                 CASE WHEN lg.rl IS NULL THEN 2147483647 ELSE lg.rl - cardinality(v.valid) END) AS cap
      FROM locked_groups lg,
           LATERAL (SELECT CASE WHEN lg.rl IS NULL THEN '{}'::timestamptz[] ELSE
                      ARRAY(SELECT t FROM unnest(lg.rate_times) AS t WHERE t > now() - lg.per ORDER BY t) END AS valid) v
  ),
  locked_tasks AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the rate rows of the rated tasks among the candidates (newest
    -- version, held until this statement ends), for the same reasons as the groups.
    SELECT r.task, r.rate_times, (limits->'tasks'->r.task->>'limit')::int AS rl,
           (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task IN (SELECT c.task FROM cand c)
       FOR UPDATE SKIP LOCKED
  ),
  troom AS MATERIALIZED (
    SELECT lt.task, lt.rl, lt.per, v.valid, lt.rl - cardinality(v.valid) AS cap
      FROM locked_tasks lt,
           LATERAL (SELECT ARRAY(SELECT t FROM unnest(lt.rate_times) AS t WHERE t > now() - lt.per ORDER BY t) AS valid) v
  ),
  by_group AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always), in claim order.
    SELECT c.* FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN groom r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
  ),
  pick AS MATERIALIZED (
    -- ... and within their task's rate room; the first n.
    SELECT c.id FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.task ORDER BY c.pos) AS ti FROM by_group c
    ) c LEFT JOIN troom t ON t.task = c.task
     WHERE NOT (c.task = ANY(rated)) OR c.ti <= t.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed.
    SELECT j.id FROM {{schema}}.jobs j
     WHERE j.id IN (SELECT id FROM pick) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM locked l
     WHERE j.id = l.id
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked above (no wait). The counter grows by this claim's jobs; the rate log
    -- keeps the claim times still in the window plus one per job (never more than the limit's length).
    UPDATE {{schema}}.job_groups g
       SET running = g.running + d.k,
           rate_times = CASE WHEN r.rl IS NULL THEN g.rate_times ELSE r.valid || array_fill(now(), ARRAY[d.k]) END
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
      JOIN groom r ON r.key = d.group_key
     WHERE g.key = d.group_key
    RETURNING g.key, r.rl, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  tu AS (
    -- Lock: the task rate rows locked above (no wait).
    UPDATE {{schema}}.task_rates tr
       SET rate_times = r.valid || array_fill(now(), ARRAY[d.k])
      FROM (SELECT task, count(*)::int AS k FROM up WHERE task = ANY(rated) GROUP BY task) d
      JOIN troom r ON r.task = d.task
     WHERE tr.task = d.task
    RETURNING tr.task, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), the ones this claim filled, and
    -- task windows that were full when locked.
    SELECT g.rate_times[1] + c.per AS at FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM gcfg WHERE rl IS NOT NULL)) AND c.rl IS NOT NULL AND cardinality(g.rate_times) >= c.rl AND g.rate_times[1] > now() - c.per
    UNION ALL SELECT oldest + per FROM gu WHERE rl IS NOT NULL AND left_after <= 0
    UNION ALL SELECT oldest + per FROM tu WHERE left_after <= 0
    UNION ALL SELECT valid[1] + per FROM troom WHERE cap <= 0
    UNION ALL
    SELECT r.rate_times[1] + (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond'
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task NOT IN (SELECT task FROM locked_tasks)
       AND r.task IN (SELECT c.task FROM cand c)
       AND cardinality(r.rate_times) >= (limits->'tasks'->r.task->>'limit')::int
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - now()) * 1000)::double precision
    FROM waits w HAVING min(w.at) IS NOT NULL;
  GET DIAGNOSTICS k = ROW_COUNT;
  got := got + k;
  EXIT WHEN pass = 1 OR got >= n;
  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at.
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;

-- ===== step 4 (004_schedules) =====
-- pg-txkit queue, migration 4: recurring schedules. Runs inside migrate()'s transaction under
-- pg_advisory_xact_lock; the new tables are invisible to others until it commits.

-- One row per schedule: the definition in force (chosen among the live declarations), and the next tick
-- to fire. A replica fires a due tick by locking this row (FOR UPDATE SKIP LOCKED), inserting the tick's
-- job and moving next_run_at past it in ONE transaction: however many replicas look at once, a tick is
-- enqueued once, and a replica that stops leaves next_run_at for any other one to pick up.
CREATE TABLE {{schema}}.schedules (
  name        text        PRIMARY KEY,
  hash        text        NOT NULL,
  definition  jsonb       NOT NULL,
  enabled     boolean     NOT NULL DEFAULT false,
  next_run_at timestamptz,
  last_tick   timestamptz,
  fired       bigint      NOT NULL DEFAULT 0,
  skipped     bigint      NOT NULL DEFAULT 0,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_enabled_has_next CHECK (NOT enabled OR next_run_at IS NOT NULL)
);

-- The due-schedule scan of every pass: enabled schedules by next run.
CREATE INDEX schedules_due ON {{schema}}.schedules (next_run_at) WHERE enabled;

-- Every definition ever declared, by (schedule, definition hash). first_declared_at orders deploys (the
-- definition first seen most recently is the newest); last_declared_at is refreshed by every replica that
-- still declares it. The definition in force is the newest one some live replica still declares; a
-- schedule no live replica declares any more is disabled. Rows are kept (a few per schedule), so an old
-- version restarting during a deploy overlap is never mistaken for a new deploy.
CREATE TABLE {{schema}}.schedule_declarations (
  name              text        NOT NULL,
  hash              text        NOT NULL,
  definition        jsonb       NOT NULL,
  first_declared_at timestamptz NOT NULL DEFAULT now(),
  last_declared_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (name, hash)
);

-- ===== step 5 (005_trace_context) =====
-- pg-txkit queue, migration 5: the W3C trace context (traceparent, tracestate) of the span that
-- enqueued a job, as the propagator wrote it; NULL without OpenTelemetry. Runs inside migrate()'s
-- transaction under pg_advisory_xact_lock.
-- Lock: ACCESS EXCLUSIVE on jobs for an instant. A nullable column without a default is a catalog
-- change only (no table rewrite, no scan), so the lock is held for microseconds once granted; it does
-- wait for running claims and settles to finish, and queues new ones behind it meanwhile.
ALTER TABLE {{schema}}.jobs ADD COLUMN IF NOT EXISTS trace_context jsonb;

-- ===== step 6 (006_job_control) =====
-- pg-txkit queue, migration 6: job control (progress, retention). Runs inside migrate()'s transaction
-- under pg_advisory_xact_lock; every lock below is held until that transaction commits, so the cheap,
-- strongest ones come last.

-- Retention of the archive: prune() deletes archived jobs finished before a cutoff, oldest first, in
-- bounded batches; this index makes each batch an index range scan instead of a scan of the archive.
-- Lock: SHARE on jobs_archive while the index is built (blocks archiving completions, not claims).
CREATE INDEX jobs_archive_finished ON {{schema}}.jobs_archive (finished_at);

-- Retention of dead jobs: prune({ dead: true }) deletes jobs dead since before a cutoff (updated_at is
-- set when a job dies). Partial: pending and running rows are not in it, so claims and settles never
-- maintain it (a claim's new row version is 'running'). Lock: SHARE on jobs while it is built (the hot
-- table is small: done jobs leave it).
CREATE INDEX jobs_dead_since ON {{schema}}.jobs (updated_at) WHERE state = 'dead';

-- Progress reported by a running handler (ctx.progress): a small JSON value, kept across retries so a
-- new attempt can resume. Nullable without a default: a catalog-only change, no table rewrite.
-- Lock: ACCESS EXCLUSIVE on jobs and jobs_archive for the rest of this (short) transaction.
ALTER TABLE {{schema}}.jobs ADD COLUMN progress jsonb;
ALTER TABLE {{schema}}.jobs_archive ADD COLUMN progress jsonb;

-- ===== step 7 (007_lean_claim) =====
-- pg-txkit queue, migration 7: the claim functions of migration 3, rewritten where they cost the most.
-- Runs inside migrate()'s transaction under pg_advisory_xact_lock. CREATE OR REPLACE FUNCTION takes no
-- lock on the tables; a claim running meanwhile finishes on the old body, the next one uses the new.
-- - claim_jobs (a queue that declares no limits): the counters of the claimed jobs' groups were updated
--   through a join that compared every group with every other (quadratic in the groups of one claim);
--   now one probe per group. (Joined to the claimed groups and sorted by key instead, the lock step
--   walked the whole primary key: sorts are disabled in these functions, so the planner read job_groups
--   in key order rather than sort a few rows.)
-- - claim_jobs_limited: a queue whose limits are concurrency only (no rate on any group, no rated
--   task) takes a lean path: it locks the groups with room and counts in one step, with no rate window
--   to read or write and no wait row. Measured on 1,000 serial groups, the full path spent most of a
--   claim there.
-- The guarantees and the locks are those of migration 3; each step says which lock it takes.

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT id FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM c
     WHERE j.id = c.id
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
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k FROM claimed c WHERE g.key = c.key
  )
  SELECT * FROM up
$$;

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision)
  LANGUAGE plpgsql VOLATILE
  -- enable_sort = off: as for claim_jobs, the ordered index scans whatever the statistics.
  -- plan_cache_mode = force_generic_plan: the statements below are planned once per connection, not
  -- at every call (planning them took ~5 ms, most of a claim's time; custom plans gain nothing here:
  -- the plan shape is fixed by the indexes).
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  -- How far one pass looks in claim order.
  budget constant integer := n * 2 + 32;
  rated text[] := ARRAY(
    SELECT t FROM jsonb_object_keys(coalesce(limits->'tasks', '{}'::jsonb)) AS t WHERE t = ANY(tasks) ORDER BY t);
  -- Whether any group has a rate limit. Without one, and without rated tasks, the claim takes the lean
  -- path below: the limits are concurrency only.
  group_rates constant boolean := (limits->'default'->'rate') IS NOT NULL
    OR EXISTS (SELECT 1 FROM jsonb_each(coalesce(limits->'groups', '{}'::jsonb)) AS e WHERE e.value ? 'rate');
  want integer := n;
  got integer := 0;
  k integer;
  cut_p integer;
  cut_r timestamptz;
  cut_id bigint;
BEGIN
  IF cardinality(rated) > 0 THEN
    -- Lock: ROW EXCLUSIVE on task_rates. Creates the rate rows of the rated tasks once; ON CONFLICT DO
    -- NOTHING takes no lock on a row that exists. Sorted, so two first claims never deadlock.
    INSERT INTO {{schema}}.task_rates (task) SELECT t FROM unnest(rated) AS t ORDER BY t ON CONFLICT DO NOTHING;
  END IF;
  -- Pass 0 looks at the first 'budget' ready jobs in claim order. Pass 1 runs only when pass 0 came back
  -- short AND there were more ready jobs than it looked at (a long run of jobs of full groups at the
  -- head): it looks at the next 'budget' jobs and at the first ready jobs of up to 'want' groups with
  -- room, found group by group, so jobs over their limit do not block the groups behind them. Each pass
  -- is one statement with a fresh snapshot; the locks of pass 0 are held through pass 1 (same
  -- transaction), and its counters are already updated.
  FOR pass IN 0..1 LOOP
  IF cardinality(rated) = 0 AND NOT group_rates THEN
  -- The lean path (concurrency limits only): no rate window to read or write, no wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  room AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the first 'want' candidate groups with room in claim order (a
    -- claim of n jobs needs at most n), primary-key probes. In READ COMMITTED the row locked is the
    -- NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so 'running' is exact
    -- and stays so until this statement ends: another claim skips a group locked here, a settle's
    -- decrement waits for it. SKIP LOCKED: a claim never waits for a group, so it is never part of a
    -- deadlock, and two claims sharing a head window split its groups.
    SELECT g.key, c.conc - g.running AS cap
      FROM {{schema}}.job_groups g
      JOIN (
        SELECT k.key, min(k.pos) AS ord,
               coalesce((coalesce(limits->'groups'->k.key, limits->'default')->>'concurrency')::int, 2147483647) AS conc
          FROM (SELECT c.group_key AS key, c.pos FROM cand c WHERE c.group_key IS NOT NULL) k
         GROUP BY k.key
      ) c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT DISTINCT c.group_key FROM cand c WHERE c.group_key IS NOT NULL))
       AND g.running < c.conc
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  pick AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always; a group not locked has none), the
    -- first n in claim order.
    SELECT c.id FROM (
      SELECT c.id, c.pos, c.group_key, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN room r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed.
    SELECT j.id FROM {{schema}}.jobs j
     WHERE j.id IN (SELECT id FROM pick) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM locked l
     WHERE j.id = l.id
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked in 'room' (no wait): every claimed job's group is one of them.
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u;
  ELSE
  -- The full path: rate windows of groups and tasks, and the wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  cgroups AS MATERIALIZED (
    -- The groups of the candidates, each with its first position in claim order. All of them, not the
    -- first n: a claim running at the same time has the same head window and locks its first groups;
    -- this one skips those and takes the next ones (see locked_groups).
    SELECT c.group_key AS key, min(c.pos) AS ord FROM cand c WHERE c.group_key IS NOT NULL
     GROUP BY c.group_key
  ),
  gcfg AS MATERIALIZED (
    SELECT k.key, k.ord,
           coalesce((l.cfg->>'concurrency')::int, 2147483647) AS conc,
           (l.cfg->'rate'->>'limit')::int AS rl,
           (l.cfg->'rate'->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM cgroups k, LATERAL (SELECT coalesce(limits->'groups'->k.key, limits->'default', '{}'::jsonb) AS cfg) l
  ),
  locked_groups AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the candidate groups that have room. In READ COMMITTED the row
    -- locked is the NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so
    -- 'running' and 'rate_times' below are exact, and stay so until this statement ends: another claim
    -- skips a group locked here, a settle's decrement waits for it. SKIP LOCKED: a group being claimed
    -- or settled right now is left to the next claim; a claim never waits, so it can never be part of a
    -- deadlock, whatever order it locks groups in. The first n groups with room in claim order that no
    -- other statement holds (a claim of n jobs needs at most n): LIMIT stops the locking there, so two
    -- claims sharing a head window split its groups instead of the second one coming back empty.
    SELECT g.key, g.running, g.rate_times, c.conc, c.rl, c.per
      FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM cgroups)) -- primary-key probes, never a scan of every group
       AND g.running < c.conc
       AND (c.rl IS NULL OR cardinality(g.rate_times) < c.rl OR g.rate_times[1] <= now() - c.per)
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  groom AS MATERIALIZED (
    -- Room in each locked group: its free slots, and its free places in the rate window.
    SELECT lg.key, lg.rl, lg.per, v.valid,
           least(lg.conc - lg.running,
                 CASE WHEN lg.rl IS NULL THEN 2147483647 ELSE lg.rl - cardinality(v.valid) END) AS cap
      FROM locked_groups lg,
           LATERAL (SELECT CASE WHEN lg.rl IS NULL THEN '{}'::timestamptz[] ELSE
                      ARRAY(SELECT t FROM unnest(lg.rate_times) AS t WHERE t > now() - lg.per ORDER BY t) END AS valid) v
  ),
  locked_tasks AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the rate rows of the rated tasks among the candidates (newest
    -- version, held until this statement ends), for the same reasons as the groups.
    SELECT r.task, r.rate_times, (limits->'tasks'->r.task->>'limit')::int AS rl,
           (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task IN (SELECT c.task FROM cand c)
       FOR UPDATE SKIP LOCKED
  ),
  troom AS MATERIALIZED (
    SELECT lt.task, lt.rl, lt.per, v.valid, lt.rl - cardinality(v.valid) AS cap
      FROM locked_tasks lt,
           LATERAL (SELECT ARRAY(SELECT t FROM unnest(lt.rate_times) AS t WHERE t > now() - lt.per ORDER BY t) AS valid) v
  ),
  by_group AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always), in claim order.
    SELECT c.* FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN groom r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
  ),
  pick AS MATERIALIZED (
    -- ... and within their task's rate room; the first n.
    SELECT c.id FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.task ORDER BY c.pos) AS ti FROM by_group c
    ) c LEFT JOIN troom t ON t.task = c.task
     WHERE NOT (c.task = ANY(rated)) OR c.ti <= t.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed.
    SELECT j.id FROM {{schema}}.jobs j
     WHERE j.id IN (SELECT id FROM pick) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM locked l
     WHERE j.id = l.id
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked above (no wait). The counter grows by this claim's jobs; the rate log
    -- keeps the claim times still in the window plus one per job (never more than the limit's length).
    UPDATE {{schema}}.job_groups g
       SET running = g.running + d.k,
           rate_times = CASE WHEN r.rl IS NULL THEN g.rate_times ELSE r.valid || array_fill(now(), ARRAY[d.k]) END
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
      JOIN groom r ON r.key = d.group_key
     WHERE g.key = d.group_key
    RETURNING g.key, r.rl, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  tu AS (
    -- Lock: the task rate rows locked above (no wait).
    UPDATE {{schema}}.task_rates tr
       SET rate_times = r.valid || array_fill(now(), ARRAY[d.k])
      FROM (SELECT task, count(*)::int AS k FROM up WHERE task = ANY(rated) GROUP BY task) d
      JOIN troom r ON r.task = d.task
     WHERE tr.task = d.task
    RETURNING tr.task, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), the ones this claim filled, and
    -- task windows that were full when locked.
    SELECT g.rate_times[1] + c.per AS at FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM gcfg WHERE rl IS NOT NULL)) AND c.rl IS NOT NULL AND cardinality(g.rate_times) >= c.rl AND g.rate_times[1] > now() - c.per
    UNION ALL SELECT oldest + per FROM gu WHERE rl IS NOT NULL AND left_after <= 0
    UNION ALL SELECT oldest + per FROM tu WHERE left_after <= 0
    UNION ALL SELECT valid[1] + per FROM troom WHERE cap <= 0
    UNION ALL
    SELECT r.rate_times[1] + (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond'
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task NOT IN (SELECT task FROM locked_tasks)
       AND r.task IN (SELECT c.task FROM cand c)
       AND cardinality(r.rate_times) >= (limits->'tasks'->r.task->>'limit')::int
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - now()) * 1000)::double precision
    FROM waits w HAVING min(w.at) IS NOT NULL;
  END IF;
  GET DIAGNOSTICS k = ROW_COUNT;
  -- k counts the full path's wait row too (at most one per pass): pass 1 may ask for one job fewer.
  got := got + k;
  -- Pass 1 is for a head of jobs over their limits (this claim got little or nothing). A pass 0 that
  -- got half of what it asked for made progress: searching group by group for the rest would cost this
  -- claim more than the next claim will.
  EXIT WHEN pass = 1 OR got * 2 >= n;
  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at.
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;

-- ===== step 8 (008_claim_token) =====
-- pg-txkit queue, migration 8: claim_jobs and claim_jobs_limited as in migration 7, except that the
-- jobs one claim statement leases share one lease token, drawn once per statement. Every settle,
-- heartbeat and progress write is fenced by the job's id AND its token, so a token per claim fences as
-- well as a token per job: a job claimed again (after a reap, a release or a retry) gets the token of
-- that later claim, and the earlier holder's writes match nothing. gen_random_uuid() reads the strong
-- random source: drawn once per job, it cost about 2 µs of the server's CPU per job.
-- Runs inside migrate()'s transaction under pg_advisory_xact_lock. CREATE OR REPLACE FUNCTION takes no
-- lock on the tables; a claim running meanwhile finishes on the old body, the next one uses the new.
-- The locks are those of migration 7; each step says which lock it takes.

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT id FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM c
     WHERE j.id = c.id
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
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k FROM claimed c WHERE g.key = c.key
  )
  SELECT * FROM up
$$;

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision)
  LANGUAGE plpgsql VOLATILE
  -- enable_sort = off: as for claim_jobs, the ordered index scans whatever the statistics.
  -- plan_cache_mode = force_generic_plan: the statements below are planned once per connection, not
  -- at every call (planning them took ~5 ms, most of a claim's time; custom plans gain nothing here:
  -- the plan shape is fixed by the indexes).
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  -- How far one pass looks in claim order.
  budget constant integer := n * 2 + 32;
  rated text[] := ARRAY(
    SELECT t FROM jsonb_object_keys(coalesce(limits->'tasks', '{}'::jsonb)) AS t WHERE t = ANY(tasks) ORDER BY t);
  -- Whether any group has a rate limit. Without one, and without rated tasks, the claim takes the lean
  -- path below: the limits are concurrency only.
  group_rates constant boolean := (limits->'default'->'rate') IS NOT NULL
    OR EXISTS (SELECT 1 FROM jsonb_each(coalesce(limits->'groups', '{}'::jsonb)) AS e WHERE e.value ? 'rate');
  want integer := n;
  got integer := 0;
  k integer;
  cut_p integer;
  cut_r timestamptz;
  cut_id bigint;
BEGIN
  IF cardinality(rated) > 0 THEN
    -- Lock: ROW EXCLUSIVE on task_rates. Creates the rate rows of the rated tasks once; ON CONFLICT DO
    -- NOTHING takes no lock on a row that exists. Sorted, so two first claims never deadlock.
    INSERT INTO {{schema}}.task_rates (task) SELECT t FROM unnest(rated) AS t ORDER BY t ON CONFLICT DO NOTHING;
  END IF;
  -- Pass 0 looks at the first 'budget' ready jobs in claim order. Pass 1 runs only when pass 0 came back
  -- short AND there were more ready jobs than it looked at (a long run of jobs of full groups at the
  -- head): it looks at the next 'budget' jobs and at the first ready jobs of up to 'want' groups with
  -- room, found group by group, so jobs over their limit do not block the groups behind them. Each pass
  -- is one statement with a fresh snapshot; the locks of pass 0 are held through pass 1 (same
  -- transaction), and its counters are already updated.
  FOR pass IN 0..1 LOOP
  IF cardinality(rated) = 0 AND NOT group_rates THEN
  -- The lean path (concurrency limits only): no rate window to read or write, no wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  room AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the first 'want' candidate groups with room in claim order (a
    -- claim of n jobs needs at most n), primary-key probes. In READ COMMITTED the row locked is the
    -- NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so 'running' is exact
    -- and stays so until this statement ends: another claim skips a group locked here, a settle's
    -- decrement waits for it. SKIP LOCKED: a claim never waits for a group, so it is never part of a
    -- deadlock, and two claims sharing a head window split its groups.
    SELECT g.key, c.conc - g.running AS cap
      FROM {{schema}}.job_groups g
      JOIN (
        SELECT k.key, min(k.pos) AS ord,
               coalesce((coalesce(limits->'groups'->k.key, limits->'default')->>'concurrency')::int, 2147483647) AS conc
          FROM (SELECT c.group_key AS key, c.pos FROM cand c WHERE c.group_key IS NOT NULL) k
         GROUP BY k.key
      ) c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT DISTINCT c.group_key FROM cand c WHERE c.group_key IS NOT NULL))
       AND g.running < c.conc
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  pick AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always; a group not locked has none), the
    -- first n in claim order.
    SELECT c.id FROM (
      SELECT c.id, c.pos, c.group_key, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN room r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed.
    SELECT j.id FROM {{schema}}.jobs j
     WHERE j.id IN (SELECT id FROM pick) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM locked l
     WHERE j.id = l.id
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked in 'room' (no wait): every claimed job's group is one of them.
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u;
  ELSE
  -- The full path: rate windows of groups and tasks, and the wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  cgroups AS MATERIALIZED (
    -- The groups of the candidates, each with its first position in claim order. All of them, not the
    -- first n: a claim running at the same time has the same head window and locks its first groups;
    -- this one skips those and takes the next ones (see locked_groups).
    SELECT c.group_key AS key, min(c.pos) AS ord FROM cand c WHERE c.group_key IS NOT NULL
     GROUP BY c.group_key
  ),
  gcfg AS MATERIALIZED (
    SELECT k.key, k.ord,
           coalesce((l.cfg->>'concurrency')::int, 2147483647) AS conc,
           (l.cfg->'rate'->>'limit')::int AS rl,
           (l.cfg->'rate'->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM cgroups k, LATERAL (SELECT coalesce(limits->'groups'->k.key, limits->'default', '{}'::jsonb) AS cfg) l
  ),
  locked_groups AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the candidate groups that have room. In READ COMMITTED the row
    -- locked is the NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so
    -- 'running' and 'rate_times' below are exact, and stay so until this statement ends: another claim
    -- skips a group locked here, a settle's decrement waits for it. SKIP LOCKED: a group being claimed
    -- or settled right now is left to the next claim; a claim never waits, so it can never be part of a
    -- deadlock, whatever order it locks groups in. The first n groups with room in claim order that no
    -- other statement holds (a claim of n jobs needs at most n): LIMIT stops the locking there, so two
    -- claims sharing a head window split its groups instead of the second one coming back empty.
    SELECT g.key, g.running, g.rate_times, c.conc, c.rl, c.per
      FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM cgroups)) -- primary-key probes, never a scan of every group
       AND g.running < c.conc
       AND (c.rl IS NULL OR cardinality(g.rate_times) < c.rl OR g.rate_times[1] <= now() - c.per)
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  groom AS MATERIALIZED (
    -- Room in each locked group: its free slots, and its free places in the rate window.
    SELECT lg.key, lg.rl, lg.per, v.valid,
           least(lg.conc - lg.running,
                 CASE WHEN lg.rl IS NULL THEN 2147483647 ELSE lg.rl - cardinality(v.valid) END) AS cap
      FROM locked_groups lg,
           LATERAL (SELECT CASE WHEN lg.rl IS NULL THEN '{}'::timestamptz[] ELSE
                      ARRAY(SELECT t FROM unnest(lg.rate_times) AS t WHERE t > now() - lg.per ORDER BY t) END AS valid) v
  ),
  locked_tasks AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the rate rows of the rated tasks among the candidates (newest
    -- version, held until this statement ends), for the same reasons as the groups.
    SELECT r.task, r.rate_times, (limits->'tasks'->r.task->>'limit')::int AS rl,
           (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task IN (SELECT c.task FROM cand c)
       FOR UPDATE SKIP LOCKED
  ),
  troom AS MATERIALIZED (
    SELECT lt.task, lt.rl, lt.per, v.valid, lt.rl - cardinality(v.valid) AS cap
      FROM locked_tasks lt,
           LATERAL (SELECT ARRAY(SELECT t FROM unnest(lt.rate_times) AS t WHERE t > now() - lt.per ORDER BY t) AS valid) v
  ),
  by_group AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always), in claim order.
    SELECT c.* FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN groom r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
  ),
  pick AS MATERIALIZED (
    -- ... and within their task's rate room; the first n.
    SELECT c.id FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.task ORDER BY c.pos) AS ti FROM by_group c
    ) c LEFT JOIN troom t ON t.task = c.task
     WHERE NOT (c.task = ANY(rated)) OR c.ti <= t.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed.
    SELECT j.id FROM {{schema}}.jobs j
     WHERE j.id IN (SELECT id FROM pick) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      FROM locked l
     WHERE j.id = l.id
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked above (no wait). The counter grows by this claim's jobs; the rate log
    -- keeps the claim times still in the window plus one per job (never more than the limit's length).
    UPDATE {{schema}}.job_groups g
       SET running = g.running + d.k,
           rate_times = CASE WHEN r.rl IS NULL THEN g.rate_times ELSE r.valid || array_fill(now(), ARRAY[d.k]) END
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
      JOIN groom r ON r.key = d.group_key
     WHERE g.key = d.group_key
    RETURNING g.key, r.rl, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  tu AS (
    -- Lock: the task rate rows locked above (no wait).
    UPDATE {{schema}}.task_rates tr
       SET rate_times = r.valid || array_fill(now(), ARRAY[d.k])
      FROM (SELECT task, count(*)::int AS k FROM up WHERE task = ANY(rated) GROUP BY task) d
      JOIN troom r ON r.task = d.task
     WHERE tr.task = d.task
    RETURNING tr.task, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), the ones this claim filled, and
    -- task windows that were full when locked.
    SELECT g.rate_times[1] + c.per AS at FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM gcfg WHERE rl IS NOT NULL)) AND c.rl IS NOT NULL AND cardinality(g.rate_times) >= c.rl AND g.rate_times[1] > now() - c.per
    UNION ALL SELECT oldest + per FROM gu WHERE rl IS NOT NULL AND left_after <= 0
    UNION ALL SELECT oldest + per FROM tu WHERE left_after <= 0
    UNION ALL SELECT valid[1] + per FROM troom WHERE cap <= 0
    UNION ALL
    SELECT r.rate_times[1] + (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond'
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task NOT IN (SELECT task FROM locked_tasks)
       AND r.task IN (SELECT c.task FROM cand c)
       AND cardinality(r.rate_times) >= (limits->'tasks'->r.task->>'limit')::int
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - now()) * 1000)::double precision
    FROM waits w HAVING min(w.at) IS NOT NULL;
  END IF;
  GET DIAGNOSTICS k = ROW_COUNT;
  -- k counts the full path's wait row too (at most one per pass): pass 1 may ask for one job fewer.
  got := got + k;
  -- Pass 1 is for a head of jobs over their limits (this claim got little or nothing). A pass 0 that
  -- got half of what it asked for made progress: searching group by group for the rest would cost this
  -- claim more than the next claim will.
  EXIT WHEN pass = 1 OR got * 2 >= n;
  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at.
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;

-- ===== step 9 (009_claim_by_tid) =====
-- pg-txkit queue, migration 9: claim_jobs and claim_jobs_limited as in migration 8, except how the
-- lease UPDATE finds the jobs the statement just locked. It joined them on the primary key, and the
-- planner chose the join: for claims of 500, with any backlog up to 100,000 jobs (at 300,000 it chose
-- the probes again), it hashed the locked ids and read the WHOLE jobs table sequentially for every
-- claim (its cost model prices 500 cached index probes above one scan of 100,000 rows). Measured with
-- 50,000 pending jobs: 18 ms for a claim of 500 instead of 6, and a third of the server's CPU in a
-- burn-down. Now the lock step returns each locked row's address (ctid) and the UPDATE fetches exactly
-- those rows: a TID scan, the only plan. A locked row version can be neither updated nor deleted by
-- another transaction until this statement's transaction ends, and VACUUM never moves a live row, so
-- each address still names the row that was locked (in READ COMMITTED a row updated after the snapshot
-- is locked on its newest version, and the address returned is that version's). The limited claim's
-- lock step probes the primary key with an array of ids for the same reason. Both functions return
-- their jobs in claim order (by address, the UPDATE returns them in the table's physical order).
-- Runs inside migrate()'s transaction under pg_advisory_xact_lock. CREATE OR REPLACE FUNCTION takes no
-- lock on the tables; a claim running meanwhile finishes on the old body, the next one uses the new.
-- The locks are those of migration 8; each step says which lock it takes.

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT ctid AS tid FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
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
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k FROM claimed c WHERE g.key = c.key
  )
  SELECT * FROM up ORDER BY priority, run_at, id
$$;

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision)
  LANGUAGE plpgsql VOLATILE
  -- enable_sort = off: as for claim_jobs, the ordered index scans whatever the statistics.
  -- plan_cache_mode = force_generic_plan: the statements below are planned once per connection, not
  -- at every call (planning them took ~5 ms, most of a claim's time; custom plans gain nothing here:
  -- the plan shape is fixed by the indexes).
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  -- How far one pass looks in claim order.
  budget constant integer := n * 2 + 32;
  rated text[] := ARRAY(
    SELECT t FROM jsonb_object_keys(coalesce(limits->'tasks', '{}'::jsonb)) AS t WHERE t = ANY(tasks) ORDER BY t);
  -- Whether any group has a rate limit. Without one, and without rated tasks, the claim takes the lean
  -- path below: the limits are concurrency only.
  group_rates constant boolean := (limits->'default'->'rate') IS NOT NULL
    OR EXISTS (SELECT 1 FROM jsonb_each(coalesce(limits->'groups', '{}'::jsonb)) AS e WHERE e.value ? 'rate');
  want integer := n;
  got integer := 0;
  k integer;
  cut_p integer;
  cut_r timestamptz;
  cut_id bigint;
BEGIN
  IF cardinality(rated) > 0 THEN
    -- Lock: ROW EXCLUSIVE on task_rates. Creates the rate rows of the rated tasks once; ON CONFLICT DO
    -- NOTHING takes no lock on a row that exists. Sorted, so two first claims never deadlock.
    INSERT INTO {{schema}}.task_rates (task) SELECT t FROM unnest(rated) AS t ORDER BY t ON CONFLICT DO NOTHING;
  END IF;
  -- Pass 0 looks at the first 'budget' ready jobs in claim order. Pass 1 runs only when pass 0 came back
  -- short AND there were more ready jobs than it looked at (a long run of jobs of full groups at the
  -- head): it looks at the next 'budget' jobs and at the first ready jobs of up to 'want' groups with
  -- room, found group by group, so jobs over their limit do not block the groups behind them. Each pass
  -- is one statement with a fresh snapshot; the locks of pass 0 are held through pass 1 (same
  -- transaction), and its counters are already updated.
  FOR pass IN 0..1 LOOP
  IF cardinality(rated) = 0 AND NOT group_rates THEN
  -- The lean path (concurrency limits only): no rate window to read or write, no wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  room AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the first 'want' candidate groups with room in claim order (a
    -- claim of n jobs needs at most n), primary-key probes. In READ COMMITTED the row locked is the
    -- NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so 'running' is exact
    -- and stays so until this statement ends: another claim skips a group locked here, a settle's
    -- decrement waits for it. SKIP LOCKED: a claim never waits for a group, so it is never part of a
    -- deadlock, and two claims sharing a head window split its groups.
    SELECT g.key, c.conc - g.running AS cap
      FROM {{schema}}.job_groups g
      JOIN (
        SELECT k.key, min(k.pos) AS ord,
               coalesce((coalesce(limits->'groups'->k.key, limits->'default')->>'concurrency')::int, 2147483647) AS conc
          FROM (SELECT c.group_key AS key, c.pos FROM cand c WHERE c.group_key IS NOT NULL) k
         GROUP BY k.key
      ) c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT DISTINCT c.group_key FROM cand c WHERE c.group_key IS NOT NULL))
       AND g.running < c.conc
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  pick AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always; a group not locked has none), the
    -- first n in claim order.
    SELECT c.id FROM (
      SELECT c.id, c.pos, c.group_key, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN room r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed. Primary-key probes (an
    -- array of ids: never a join the planner could turn into a scan of the table); each locked row's
    -- address goes to the UPDATE (see ClaimTarget in claim-steps.ts).
    SELECT j.ctid AS tid FROM {{schema}}.jobs j
     WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    -- The rows locked in 'locked' (no wait), fetched by address.
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
     WHERE j.ctid = ANY(ARRAY(SELECT tid FROM locked))
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked in 'room' (no wait): every claimed job's group is one of them.
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u ORDER BY u.priority, u.run_at, u.id;
  ELSE
  -- The full path: rate windows of groups and tasks, and the wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  cgroups AS MATERIALIZED (
    -- The groups of the candidates, each with its first position in claim order. All of them, not the
    -- first n: a claim running at the same time has the same head window and locks its first groups;
    -- this one skips those and takes the next ones (see locked_groups).
    SELECT c.group_key AS key, min(c.pos) AS ord FROM cand c WHERE c.group_key IS NOT NULL
     GROUP BY c.group_key
  ),
  gcfg AS MATERIALIZED (
    SELECT k.key, k.ord,
           coalesce((l.cfg->>'concurrency')::int, 2147483647) AS conc,
           (l.cfg->'rate'->>'limit')::int AS rl,
           (l.cfg->'rate'->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM cgroups k, LATERAL (SELECT coalesce(limits->'groups'->k.key, limits->'default', '{}'::jsonb) AS cfg) l
  ),
  locked_groups AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the candidate groups that have room. In READ COMMITTED the row
    -- locked is the NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so
    -- 'running' and 'rate_times' below are exact, and stay so until this statement ends: another claim
    -- skips a group locked here, a settle's decrement waits for it. SKIP LOCKED: a group being claimed
    -- or settled right now is left to the next claim; a claim never waits, so it can never be part of a
    -- deadlock, whatever order it locks groups in. The first n groups with room in claim order that no
    -- other statement holds (a claim of n jobs needs at most n): LIMIT stops the locking there, so two
    -- claims sharing a head window split its groups instead of the second one coming back empty.
    SELECT g.key, g.running, g.rate_times, c.conc, c.rl, c.per
      FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM cgroups)) -- primary-key probes, never a scan of every group
       AND g.running < c.conc
       AND (c.rl IS NULL OR cardinality(g.rate_times) < c.rl OR g.rate_times[1] <= now() - c.per)
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  groom AS MATERIALIZED (
    -- Room in each locked group: its free slots, and its free places in the rate window.
    SELECT lg.key, lg.rl, lg.per, v.valid,
           least(lg.conc - lg.running,
                 CASE WHEN lg.rl IS NULL THEN 2147483647 ELSE lg.rl - cardinality(v.valid) END) AS cap
      FROM locked_groups lg,
           LATERAL (SELECT CASE WHEN lg.rl IS NULL THEN '{}'::timestamptz[] ELSE
                      ARRAY(SELECT t FROM unnest(lg.rate_times) AS t WHERE t > now() - lg.per ORDER BY t) END AS valid) v
  ),
  locked_tasks AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the rate rows of the rated tasks among the candidates (newest
    -- version, held until this statement ends), for the same reasons as the groups.
    SELECT r.task, r.rate_times, (limits->'tasks'->r.task->>'limit')::int AS rl,
           (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task IN (SELECT c.task FROM cand c)
       FOR UPDATE SKIP LOCKED
  ),
  troom AS MATERIALIZED (
    SELECT lt.task, lt.rl, lt.per, v.valid, lt.rl - cardinality(v.valid) AS cap
      FROM locked_tasks lt,
           LATERAL (SELECT ARRAY(SELECT t FROM unnest(lt.rate_times) AS t WHERE t > now() - lt.per ORDER BY t) AS valid) v
  ),
  by_group AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always), in claim order.
    SELECT c.* FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN groom r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
  ),
  pick AS MATERIALIZED (
    -- ... and within their task's rate room; the first n.
    SELECT c.id FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.task ORDER BY c.pos) AS ti FROM by_group c
    ) c LEFT JOIN troom t ON t.task = c.task
     WHERE NOT (c.task = ANY(rated)) OR c.ti <= t.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed. Primary-key probes (an
    -- array of ids: never a join the planner could turn into a scan of the table); each locked row's
    -- address goes to the UPDATE (see ClaimTarget in claim-steps.ts).
    SELECT j.ctid AS tid FROM {{schema}}.jobs j
     WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    -- The rows locked in 'locked' (no wait), fetched by address.
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
     WHERE j.ctid = ANY(ARRAY(SELECT tid FROM locked))
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked above (no wait). The counter grows by this claim's jobs; the rate log
    -- keeps the claim times still in the window plus one per job (never more than the limit's length).
    UPDATE {{schema}}.job_groups g
       SET running = g.running + d.k,
           rate_times = CASE WHEN r.rl IS NULL THEN g.rate_times ELSE r.valid || array_fill(now(), ARRAY[d.k]) END
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
      JOIN groom r ON r.key = d.group_key
     WHERE g.key = d.group_key
    RETURNING g.key, r.rl, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  tu AS (
    -- Lock: the task rate rows locked above (no wait).
    UPDATE {{schema}}.task_rates tr
       SET rate_times = r.valid || array_fill(now(), ARRAY[d.k])
      FROM (SELECT task, count(*)::int AS k FROM up WHERE task = ANY(rated) GROUP BY task) d
      JOIN troom r ON r.task = d.task
     WHERE tr.task = d.task
    RETURNING tr.task, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(now(), ARRAY[d.k]))[1] AS oldest
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), the ones this claim filled, and
    -- task windows that were full when locked.
    SELECT g.rate_times[1] + c.per AS at FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM gcfg WHERE rl IS NOT NULL)) AND c.rl IS NOT NULL AND cardinality(g.rate_times) >= c.rl AND g.rate_times[1] > now() - c.per
    UNION ALL SELECT oldest + per FROM gu WHERE rl IS NOT NULL AND left_after <= 0
    UNION ALL SELECT oldest + per FROM tu WHERE left_after <= 0
    UNION ALL SELECT valid[1] + per FROM troom WHERE cap <= 0
    UNION ALL
    SELECT r.rate_times[1] + (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond'
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task NOT IN (SELECT task FROM locked_tasks)
       AND r.task IN (SELECT c.task FROM cand c)
       AND cardinality(r.rate_times) >= (limits->'tasks'->r.task->>'limit')::int
  )
  (SELECT u::{{schema}}.jobs, NULL::double precision FROM up u ORDER BY u.priority, u.run_at, u.id)
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - now()) * 1000)::double precision
    FROM waits w HAVING min(w.at) IS NOT NULL;
  END IF;
  GET DIAGNOSTICS k = ROW_COUNT;
  -- k counts the full path's wait row too (at most one per pass): pass 1 may ask for one job fewer.
  got := got + k;
  -- Pass 1 is for a head of jobs over their limits (this claim got little or nothing). A pass 0 that
  -- got half of what it asked for made progress: searching group by group for the rest would cost this
  -- claim more than the next claim will.
  EXIT WHEN pass = 1 OR got * 2 >= n;
  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at.
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;

-- ===== step 10 (010_take_over_function) =====
-- pg-txkit queue, migration 10: complete_take_next, the completion that takes over the group slots it
-- frees, as a function of two statements instead of one statement of many steps. Two reasons, both
-- measured with two workers burning down a grouped backlog:
-- 1. Its plans are kept per connection (plan_cache_mode = force_generic_plan). Planning the single
--    statement took about 1 ms per completion, about 3 µs per job.
-- 2. The next jobs are looked for with a snapshot taken after the completed jobs are gone, not at the
--    start of a statement that first deletes them. With few groups, both workers look at the same first
--    ready jobs of a group; a job the other worker has just taken over still looked ready in an older
--    snapshot, and locking it (FOR UPDATE SKIP LOCKED follows a committed update to the newest
--    version, locks it, and only then finds it no longer pending) held the other worker's running job
--    until this statement ended: that worker's completion of it waited. Over 4 groups, a completion in
--    flight was waiting for such a lock in about 30% of the samples (bench/queue/completion-waits.mjs),
--    15% with this function.
-- Runs inside migrate()'s transaction under pg_advisory_xact_lock. CREATE FUNCTION takes no lock on the
-- tables. Each statement below says which lock it takes.
CREATE FUNCTION {{schema}}.complete_take_next(
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
  OR j.trace_context IS NOT NULL THEN json_build_array(j.key, j.last_error, j.progress, j.group_key, j.trace_context) END) AS extras
    FROM (SELECT * FROM taken ORDER BY priority, run_at, id) j;
END $$;

-- ===== step 11 (011_rate_clock_after_lock) =====
-- pg-txkit queue, migration 11: claim_jobs and claim_jobs_limited as in migration 9, except the clock of
-- the rate limits. claim_jobs_limited checked each rate window and stamped its claims with now(), the
-- start of the claim's transaction, which comes before the claim locks the group and task rows: by up
-- to a planning's time (a worker's first claim after a restart: ~17 ms) or a wait for a pool client.
-- With two worker processes, one real-time second held 13 claims of a task limited to 10 per second,
-- and a group limited to 4 got 5, on every run and after a server restart. Now the claim takes
-- clock_timestamp() once, after both lock steps have locked their rows, and checks and stamps every
-- window with it: stamps of one group or task follow the order in which claims held its row, so at
-- most 'limit' claims fall in ANY interval of 'per' of the server's clock. (Which groups to lock is
-- still chosen with now(): an earlier clock only leaves out a group whose window frees meanwhile.)
-- Runs inside migrate()'s transaction under pg_advisory_xact_lock. CREATE OR REPLACE FUNCTION takes no
-- lock on the tables; a claim running meanwhile finishes on the old body, the next one uses the new.
-- The locks are those of migration 9; each step says which lock it takes.

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT ctid AS tid FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
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
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k FROM claimed c WHERE g.key = c.key
  )
  SELECT * FROM up ORDER BY priority, run_at, id
$$;

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision)
  LANGUAGE plpgsql VOLATILE
  -- enable_sort = off: as for claim_jobs, the ordered index scans whatever the statistics.
  -- plan_cache_mode = force_generic_plan: the statements below are planned once per connection, not
  -- at every call (planning them took ~5 ms, most of a claim's time; custom plans gain nothing here:
  -- the plan shape is fixed by the indexes).
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  -- How far one pass looks in claim order.
  budget constant integer := n * 2 + 32;
  rated text[] := ARRAY(
    SELECT t FROM jsonb_object_keys(coalesce(limits->'tasks', '{}'::jsonb)) AS t WHERE t = ANY(tasks) ORDER BY t);
  -- Whether any group has a rate limit. Without one, and without rated tasks, the claim takes the lean
  -- path below: the limits are concurrency only.
  group_rates constant boolean := (limits->'default'->'rate') IS NOT NULL
    OR EXISTS (SELECT 1 FROM jsonb_each(coalesce(limits->'groups', '{}'::jsonb)) AS e WHERE e.value ? 'rate');
  want integer := n;
  got integer := 0;
  k integer;
  cut_p integer;
  cut_r timestamptz;
  cut_id bigint;
BEGIN
  IF cardinality(rated) > 0 THEN
    -- Lock: ROW EXCLUSIVE on task_rates. Creates the rate rows of the rated tasks once; ON CONFLICT DO
    -- NOTHING takes no lock on a row that exists. Sorted, so two first claims never deadlock.
    INSERT INTO {{schema}}.task_rates (task) SELECT t FROM unnest(rated) AS t ORDER BY t ON CONFLICT DO NOTHING;
  END IF;
  -- Pass 0 looks at the first 'budget' ready jobs in claim order. Pass 1 runs only when pass 0 came back
  -- short AND there were more ready jobs than it looked at (a long run of jobs of full groups at the
  -- head): it looks at the next 'budget' jobs and at the first ready jobs of up to 'want' groups with
  -- room, found group by group, so jobs over their limit do not block the groups behind them. Each pass
  -- is one statement with a fresh snapshot; the locks of pass 0 are held through pass 1 (same
  -- transaction), and its counters are already updated.
  FOR pass IN 0..1 LOOP
  IF cardinality(rated) = 0 AND NOT group_rates THEN
  -- The lean path (concurrency limits only): no rate window to read or write, no wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  room AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the first 'want' candidate groups with room in claim order (a
    -- claim of n jobs needs at most n), primary-key probes. In READ COMMITTED the row locked is the
    -- NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so 'running' is exact
    -- and stays so until this statement ends: another claim skips a group locked here, a settle's
    -- decrement waits for it. SKIP LOCKED: a claim never waits for a group, so it is never part of a
    -- deadlock, and two claims sharing a head window split its groups.
    SELECT g.key, c.conc - g.running AS cap
      FROM {{schema}}.job_groups g
      JOIN (
        SELECT k.key, min(k.pos) AS ord,
               coalesce((coalesce(limits->'groups'->k.key, limits->'default')->>'concurrency')::int, 2147483647) AS conc
          FROM (SELECT c.group_key AS key, c.pos FROM cand c WHERE c.group_key IS NOT NULL) k
         GROUP BY k.key
      ) c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT DISTINCT c.group_key FROM cand c WHERE c.group_key IS NOT NULL))
       AND g.running < c.conc
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  pick AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always; a group not locked has none), the
    -- first n in claim order.
    SELECT c.id FROM (
      SELECT c.id, c.pos, c.group_key, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN room r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed. Primary-key probes (an
    -- array of ids: never a join the planner could turn into a scan of the table); each locked row's
    -- address goes to the UPDATE (see ClaimTarget in claim-steps.ts).
    SELECT j.ctid AS tid FROM {{schema}}.jobs j
     WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    -- The rows locked in 'locked' (no wait), fetched by address.
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
     WHERE j.ctid = ANY(ARRAY(SELECT tid FROM locked))
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked in 'room' (no wait): every claimed job's group is one of them.
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u ORDER BY u.priority, u.run_at, u.id;
  ELSE
  -- The full path: rate windows of groups and tasks, and the wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan), after the cut
    -- in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready. Reads job_groups, one row per group: O(groups), in a pass that runs only behind
    -- a long run of jobs over their limits.
    SELECT q.id, q.task, q.group_key, q.priority, q.run_at, budget + row_number() OVER () AS pos
      FROM (
        SELECT g.key FROM {{schema}}.job_groups g
         WHERE pass = 1
           AND g.running < coalesce((coalesce(limits->'groups'->g.key, limits->'default')->>'concurrency')::int, 2147483647)
         LIMIT want
      ) g2
      CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
         WHERE coalesce(j.group_key, '') = g2.key AND j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated))
             ORDER BY j.priority, j.run_at, j.id
             LIMIT want) u
  ),
  cand AS MATERIALIZED (
    -- Each job once: deep leaves out the jobs of the head window.
    SELECT * FROM head UNION ALL SELECT * FROM deep d WHERE d.id NOT IN (SELECT id FROM head)
  ),
  cgroups AS MATERIALIZED (
    -- The groups of the candidates, each with its first position in claim order. All of them, not the
    -- first n: a claim running at the same time has the same head window and locks its first groups;
    -- this one skips those and takes the next ones (see locked_groups).
    SELECT c.group_key AS key, min(c.pos) AS ord FROM cand c WHERE c.group_key IS NOT NULL
     GROUP BY c.group_key
  ),
  gcfg AS MATERIALIZED (
    SELECT k.key, k.ord,
           coalesce((l.cfg->>'concurrency')::int, 2147483647) AS conc,
           (l.cfg->'rate'->>'limit')::int AS rl,
           (l.cfg->'rate'->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM cgroups k, LATERAL (SELECT coalesce(limits->'groups'->k.key, limits->'default', '{}'::jsonb) AS cfg) l
  ),
  locked_groups AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the candidate groups that have room. In READ COMMITTED the row
    -- locked is the NEWEST committed version and the WHERE is re-checked on it (EvalPlanQual), so
    -- 'running' and 'rate_times' below are exact, and stay so until this statement ends: another claim
    -- skips a group locked here, a settle's decrement waits for it. SKIP LOCKED: a group being claimed
    -- or settled right now is left to the next claim; a claim never waits, so it can never be part of a
    -- deadlock, whatever order it locks groups in. The first n groups with room in claim order that no
    -- other statement holds (a claim of n jobs needs at most n): LIMIT stops the locking there, so two
    -- claims sharing a head window split its groups instead of the second one coming back empty.
    SELECT g.key, g.running, g.rate_times, c.conc, c.rl, c.per
      FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM cgroups)) -- primary-key probes, never a scan of every group
       AND g.running < c.conc
       AND (c.rl IS NULL OR cardinality(g.rate_times) < c.rl OR g.rate_times[1] <= now() - c.per)
     ORDER BY c.ord
     LIMIT want
       FOR UPDATE OF g SKIP LOCKED
  ),
  locked_tasks AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the rate rows of the rated tasks among the candidates (newest
    -- version, held until this statement ends), for the same reasons as the groups.
    SELECT r.task, r.rate_times, (limits->'tasks'->r.task->>'limit')::int AS rl,
           (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task IN (SELECT c.task FROM cand c)
       FOR UPDATE SKIP LOCKED
  ),
  clk AS MATERIALIZED (
    -- No lock. clock_timestamp() once, after the lock steps above have locked all their rows (it
    -- counts them first): every rate window below is checked and stamped with this one time.
    SELECT clock_timestamp() AS locked_at
      FROM (SELECT count(*) FROM locked_groups) g, (SELECT count(*) FROM locked_tasks) r
  ),
  groom AS MATERIALIZED (
    -- Room in each locked group: its free slots, and its free places in the rate window.
    SELECT lg.key, lg.rl, lg.per, v.valid,
           least(lg.conc - lg.running,
                 CASE WHEN lg.rl IS NULL THEN 2147483647 ELSE lg.rl - cardinality(v.valid) END) AS cap
      FROM locked_groups lg,
           LATERAL (SELECT CASE WHEN lg.rl IS NULL THEN '{}'::timestamptz[] ELSE
                      ARRAY(SELECT t FROM unnest(lg.rate_times) AS t WHERE t > (SELECT locked_at FROM clk) - lg.per ORDER BY t) END AS valid) v
  ),
  troom AS MATERIALIZED (
    SELECT lt.task, lt.rl, lt.per, v.valid, lt.rl - cardinality(v.valid) AS cap
      FROM locked_tasks lt,
           LATERAL (SELECT ARRAY(SELECT t FROM unnest(lt.rate_times) AS t WHERE t > (SELECT locked_at FROM clk) - lt.per ORDER BY t) AS valid) v
  ),
  by_group AS MATERIALIZED (
    -- Candidates within their group's room (ungrouped ones always), in claim order.
    SELECT c.* FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.group_key ORDER BY c.pos) AS gi FROM cand c
    ) c LEFT JOIN groom r ON r.key = c.group_key
     WHERE c.group_key IS NULL OR c.gi <= r.cap
  ),
  pick AS MATERIALIZED (
    -- ... and within their task's rate room; the first n.
    SELECT c.id FROM (
      SELECT c.*, row_number() OVER (PARTITION BY c.task ORDER BY c.pos) AS ti FROM by_group c
    ) c LEFT JOIN troom t ON t.task = c.task
     WHERE NOT (c.task = ANY(rated)) OR c.ti <= t.cap
     ORDER BY c.pos
     LIMIT want
  ),
  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed. Primary-key probes (an
    -- array of ids: never a join the planner could turn into a scan of the table); each locked row's
    -- address goes to the UPDATE (see ClaimTarget in claim-steps.ts).
    SELECT j.ctid AS tid FROM {{schema}}.jobs j
     WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    -- The rows locked in 'locked' (no wait), fetched by address.
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
     WHERE j.ctid = ANY(ARRAY(SELECT tid FROM locked))
    RETURNING j.*
  ),
  gu AS (
    -- Lock: the group rows locked above (no wait). The counter grows by this claim's jobs; the rate log
    -- keeps the claim times still in the window plus one per job (never more than the limit's length).
    UPDATE {{schema}}.job_groups g
       SET running = g.running + d.k,
           rate_times = CASE WHEN r.rl IS NULL THEN g.rate_times ELSE r.valid || array_fill((SELECT locked_at FROM clk), ARRAY[d.k]) END
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
      JOIN groom r ON r.key = d.group_key
     WHERE g.key = d.group_key
    RETURNING g.key, r.rl, r.per, r.cap - d.k AS left_after, (r.valid || array_fill((SELECT locked_at FROM clk), ARRAY[d.k]))[1] AS oldest
  ),
  tu AS (
    -- Lock: the task rate rows locked above (no wait).
    UPDATE {{schema}}.task_rates tr
       SET rate_times = r.valid || array_fill((SELECT locked_at FROM clk), ARRAY[d.k])
      FROM (SELECT task, count(*)::int AS k FROM up WHERE task = ANY(rated) GROUP BY task) d
      JOIN troom r ON r.task = d.task
     WHERE tr.task = d.task
    RETURNING tr.task, r.per, r.cap - d.k AS left_after, (r.valid || array_fill((SELECT locked_at FROM clk), ARRAY[d.k]))[1] AS oldest
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), the ones this claim filled, and
    -- task windows that were full when locked.
    SELECT g.rate_times[1] + c.per AS at FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM gcfg WHERE rl IS NOT NULL)) AND c.rl IS NOT NULL AND cardinality(g.rate_times) >= c.rl AND g.rate_times[1] > (SELECT locked_at FROM clk) - c.per
    UNION ALL SELECT oldest + per FROM gu WHERE rl IS NOT NULL AND left_after <= 0
    UNION ALL SELECT oldest + per FROM tu WHERE left_after <= 0
    UNION ALL SELECT valid[1] + per FROM troom WHERE cap <= 0
    UNION ALL
    SELECT r.rate_times[1] + (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond'
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task NOT IN (SELECT task FROM locked_tasks)
       AND r.task IN (SELECT c.task FROM cand c)
       AND cardinality(r.rate_times) >= (limits->'tasks'->r.task->>'limit')::int
  )
  (SELECT u::{{schema}}.jobs, NULL::double precision FROM up u ORDER BY u.priority, u.run_at, u.id)
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - (SELECT locked_at FROM clk)) * 1000)::double precision
    FROM waits w HAVING min(w.at) IS NOT NULL;
  END IF;
  GET DIAGNOSTICS k = ROW_COUNT;
  -- k counts the full path's wait row too (at most one per pass): pass 1 may ask for one job fewer.
  got := got + k;
  -- Pass 1 is for a head of jobs over their limits (this claim got little or nothing). A pass 0 that
  -- got half of what it asked for made progress: searching group by group for the rest would cost this
  -- claim more than the next claim will.
  EXIT WHEN pass = 1 OR got * 2 >= n;
  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at.
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;
