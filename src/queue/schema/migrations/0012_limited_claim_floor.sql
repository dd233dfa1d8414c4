-- pg-txkit queue schema, migration 0012: the limited claim (groups, rates) starts at the claim floor.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: while a session holds the MVCC horizon back, claiming a job leaves its entry in jobs_claimable
-- and nothing removes or marks it. The plain claim starts at a floor for that (migration 0005, src/queue/
-- store/claim-floor.ts); claim_jobs_limited read its head window ('budget' entries) and, for pass 1, the
-- cut from the front of the index: every job claimed since the horizon was held, at every claim, even a
-- claim that finds nothing. Measured (test/integration/queue-claim-floor.test.ts: a REPEATABLE READ
-- snapshot held while 5,000 jobs of ten groups are claimed 100 at a time and completed; a claim of 100
-- that finds nothing, shared buffers): from the front 13 after 200 jobs and 292 after 5,000, concurrency
-- limits or a group rate, PostgreSQL 18 and 14; from the floor 13 to 16 and 14 (18), 58 (14: without
-- skip scan the entries behind the floor are still read on the index's leaf pages, by the window and the
-- search for its end, but their heap pages are not visited).
-- With no snapshot held the worker sends the claim from the front as before (the floor is used only
-- after a sweep found many entries left behind, see claim-floor.ts); this body adds the floor's row
-- ('fb'), measured (bench/queue/limited-claim-variants.mjs, claims of 8 over 50 groups, the backend's
-- CPU, the medians of four runs): 800–900 µs with 0011's body, 880–940 with this one (concurrency
-- limits); 1,080–1,240 and 1,140–1,340 with a group rate; rounds vary by ±100 µs.
-- Now claim_jobs_limited(n, lease_ms, tasks, limits, from_at, from_id) reads its head window, the cut and
-- pass 1's window from the key (from_at, from_id) (the worker's claim floor, the same as the plain
-- claim's; '-infinity': from the front, a sweep), and returns one more row, not a job (pass 0's, always
-- exactly one): bound_ms and bound_id, the key the floor may rise to, and bound_priority (see 'fb'
-- below). Where the plain
-- claim's floor may rise to the smallest key it took, this one may rise only to the smallest key of a
-- job its head window left behind (a group or rate window full, a job locked by another statement):
-- jobs held back by their limits stay above the floor, and so does the wait hint's view of them (the
-- 'waits' step reads the groups and tasks of the window, as before). A job below the floor (enqueued
-- with a run_at in the past, or by a transaction open longer than the floor's slack) is taken by the
-- next sweep, as for the plain claim. Pass 1's searches of groups one by one (jobs_group_ready) start at
-- the floor too: below it a group has only the entries of jobs claimed since the horizon was held, and
-- stragglers. Measured (the same test, ten serial groups, then a head window full of a serial group's
-- jobs, so that a claim of 10 searches the ten groups one by one): 97 shared buffers after 200 jobs and
-- 136 after 5,000 (PostgreSQL 18), 96 and 215 (14); with only the head window from the floor, 1,282
-- and 1,347; all from the front, 103 and 1,708.
-- Everything else is migration 0011's body: the same locks, the same settings (enable_sort = off,
-- plan_cache_mode = force_generic_plan, enable_seqscan = off), the same lock steps (IS NOT DISTINCT FROM
-- 'pending', read through the primary key).
-- The four-argument claim_jobs_limited (a worker of the previous version, during a rolling deploy)
-- becomes a call of the new one from the front, without the floor's row: one body for both.
-- CREATE FUNCTION and CREATE OR REPLACE FUNCTION take no lock on the tables; a claim running meanwhile
-- finishes on the old body. Each step says which lock it takes.

CREATE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb,
                                              from_at timestamptz, from_id bigint)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision, bound_ms double precision, bound_id bigint,
                 bound_priority integer)
  LANGUAGE plpgsql VOLATILE
  -- enable_sort = off: as for claim_jobs, the ordered index scans whatever the statistics.
  -- plan_cache_mode = force_generic_plan: the statements below are planned once per connection, not
  -- at every call (planning them took ~5 ms, most of a claim's time; custom plans gain nothing here:
  -- the plan shape is fixed by the indexes).
  -- enable_seqscan = off: as migration 0006 set it (CREATE OR REPLACE replaces the function's settings
  -- with these: without it here the lease UPDATE's cached plan could again keep a sequential scan).
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
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
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan) from the claim
    -- floor (from_at, from_id), after the cut in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (run_at, id) >= (from_at, from_id)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready, each group from the claim floor. Reads job_groups, one row per group: O(groups),
    -- in a pass that runs only behind a long run of jobs over their limits.
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
           AND (j.run_at, j.id) >= (from_at, from_id)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated)) AND (j.run_at, j.id) >= (from_at, from_id)
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
     WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND j.state IS NOT DISTINCT FROM 'pending' AND j.run_at <= now()
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
  fb AS (
    -- No lock; read in pass 0 only. What the claim floor may rise to (src/queue/store/claim-floor.ts):
    -- the smallest key (run_at as epoch ms, floor; id) of a job of the head window this claim left (its
    -- group or rate window full, or locked by another statement), and the window's last key when the
    -- window was full (the jobs after it were not read), with then the window's last priority (the
    -- caller checks that no ready job of a later priority lies between the floor and that key:
    -- claim_floor_behind, in the measured claim only); 'Infinity': it took every job it read and read
    -- every ready job from the floor. A claim of none reads nothing for it ('Infinity').
    SELECT CASE WHEN w.k IS NULL THEN 'Infinity'::float8 ELSE w.k[1]::float8 END AS ms, w.k[2] AS id,
           CASE WHEN w.is_full THEN w.last_p END AS p
      FROM (SELECT min(ARRAY[floor(extract(epoch FROM h.run_at) * 1000)::bigint, h.id])
                     FILTER (WHERE h.pos = budget OR h.id NOT IN (SELECT u.id FROM up u)) AS k,
                   count(*) >= budget AS is_full, max(h.priority) AS last_p
              FROM head h WHERE n > 0) w
  ),
  gu AS (
    -- Lock: the group rows locked in 'room' (no wait): every claimed job's group is one of them.
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key
  )
  (SELECT u::{{schema}}.jobs, NULL::double precision, NULL::double precision, NULL::bigint, NULL::integer
     FROM up u ORDER BY u.priority, u.run_at, u.id)
  UNION ALL
  -- The floor's row (pass 0 only, exactly one): not a job, not a wait.
  SELECT NULL::{{schema}}.jobs, NULL::double precision, fb.ms, fb.id, fb.p FROM fb WHERE pass = 0;
  ELSE
  -- The full path: rate windows of groups and tasks, and the wait row.
  RETURN QUERY
  WITH head AS MATERIALIZED (
    -- No lock: 'budget' ready jobs in claim order (jobs_claimable, an ordered index scan) from the claim
    -- floor (from_at, from_id), after the cut in pass 1.
    SELECT j.id, j.task, j.group_key, j.priority, j.run_at,
           row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS pos
      FROM (SELECT id, task, group_key, priority, run_at FROM {{schema}}.jobs
             WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
               AND (run_at, id) >= (from_at, from_id)
               AND (pass = 0 OR (priority, run_at, id) > (cut_p, cut_r, cut_id))
             ORDER BY priority, run_at, id
             LIMIT budget) j
  ),
  deep AS MATERIALIZED (
    -- No lock; pass 1 only. The first ready jobs of up to 'want' groups that look like they have room (a
    -- snapshot read, only a preselection: the limit is checked under the group's lock below), through
    -- jobs_group_ready, each group from the claim floor. Reads job_groups, one row per group: O(groups),
    -- in a pass that runs only behind a long run of jobs over their limits.
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
           AND (j.run_at, j.id) >= (from_at, from_id)
         ORDER BY j.priority, j.run_at, j.id
         LIMIT least(want, coalesce((coalesce(limits->'groups'->g2.key, limits->'default')->>'concurrency')::int, want))
      ) q
    UNION ALL
    -- ... and the first ready ungrouped jobs of unrated tasks (jobs_group_ready under '': ungrouped
    -- jobs only, in claim order).
    SELECT u.id, u.task, u.group_key, u.priority, u.run_at, 2 * budget + row_number() OVER () AS pos
      FROM (SELECT j.id, j.task, j.group_key, j.priority, j.run_at FROM {{schema}}.jobs j
             WHERE pass = 1 AND coalesce(j.group_key, '') = '' AND j.state = 'pending' AND j.run_at <= now()
               AND j.task = ANY(tasks) AND NOT (j.task = ANY(rated)) AND (j.run_at, j.id) >= (from_at, from_id)
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
     WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND j.state IS NOT DISTINCT FROM 'pending' AND j.run_at <= now()
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
  fb AS (
    -- No lock; read in pass 0 only. What the claim floor may rise to (src/queue/store/claim-floor.ts):
    -- the smallest key (run_at as epoch ms, floor; id) of a job of the head window this claim left (its
    -- group or rate window full, or locked by another statement), and the window's last key when the
    -- window was full (the jobs after it were not read), with then the window's last priority (the
    -- caller checks that no ready job of a later priority lies between the floor and that key:
    -- claim_floor_behind, in the measured claim only); 'Infinity': it took every job it read and read
    -- every ready job from the floor. A claim of none reads nothing for it ('Infinity').
    SELECT CASE WHEN w.k IS NULL THEN 'Infinity'::float8 ELSE w.k[1]::float8 END AS ms, w.k[2] AS id,
           CASE WHEN w.is_full THEN w.last_p END AS p
      FROM (SELECT min(ARRAY[floor(extract(epoch FROM h.run_at) * 1000)::bigint, h.id])
                     FILTER (WHERE h.pos = budget OR h.id NOT IN (SELECT u.id FROM up u)) AS k,
                   count(*) >= budget AS is_full, max(h.priority) AS last_p
              FROM head h WHERE n > 0) w
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), full by the clock locked_groups
    -- chose with, now(), so that none it left out is missing here (one that freed since gives a wait of
    -- 0); the ones this claim filled; and task windows that were full when locked.
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
  (SELECT u::{{schema}}.jobs, NULL::double precision, NULL::double precision, NULL::bigint, NULL::integer
     FROM up u ORDER BY u.priority, u.run_at, u.id)
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - (SELECT locked_at FROM clk)) * 1000)::double precision,
         NULL::double precision, NULL::bigint, NULL::integer
    FROM waits w HAVING min(w.at) IS NOT NULL
  UNION ALL
  -- The floor's row (pass 0 only, exactly one): not a job, not a wait.
  SELECT NULL::{{schema}}.jobs, NULL::double precision, fb.ms, fb.id, fb.p FROM fb WHERE pass = 0;
  END IF;
  GET DIAGNOSTICS k = ROW_COUNT;
  -- k counts the full path's wait row too (at most one per pass): pass 1 may ask for one job fewer. The
  -- floor's row of pass 0 is not counted.
  IF pass = 0 THEN k := k - 1; END IF;
  got := got + k;
  -- Pass 1 is for a head of jobs over their limits (this claim got little or nothing). A pass 0 that
  -- got half of what it asked for made progress: searching group by group for the rest would cost this
  -- claim more than the next claim will.
  EXIT WHEN pass = 1 OR got * 2 >= n;
  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at (from the floor,
  -- as pass 0 read).
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
     AND (j.run_at, j.id) >= (from_at, from_id)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;

-- The claim of migration 0011, from the front: the call above without its floor's row. Same signature:
-- CREATE OR REPLACE keeps the function's grants; the settings are given again (CREATE OR REPLACE would
-- otherwise drop them; the function above has its own). Locks and plans: those of the function above.
CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs_limited(n integer, lease_ms double precision, tasks text[], limits jsonb)
  RETURNS TABLE (job {{schema}}.jobs, wait_ms double precision)
  LANGUAGE sql VOLATILE
  SET enable_sort = off
  SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
AS $$
  SELECT r.job, r.wait_ms
    FROM {{schema}}.claim_jobs_limited(n, lease_ms, tasks, limits, '-infinity'::timestamptz, 0::bigint) AS r
   WHERE r.bound_ms IS NULL
$$;
