import { type ClaimTarget, claimedRows, claimJobsOpening, claimLease, inClaimOrder } from './claim-steps.js';

/**
 * The parts of claim_jobs_limited's plpgsql body that its versions share (migrations 3 and 7): the
 * first declarations (`budget`, `rated`), the loop variables, the prologue before the loop (the rate rows
 * of the rated tasks, and how the two passes work), and the end of a pass (where pass 0's look ended,
 * the loop's end and the function's).
 */
export const limitedDeclarations = `  -- How far one pass looks in claim order.
  budget constant integer := n * 2 + 32;
  rated text[] := ARRAY(
    SELECT t FROM jsonb_object_keys(coalesce(limits->'tasks', '{}'::jsonb)) AS t WHERE t = ANY(tasks) ORDER BY t);
`;

/** See {@link limitedDeclarations}. */
export const limitedVariables = `  want integer := n;
  got integer := 0;
  k integer;
  cut_p integer;
  cut_r timestamptz;
  cut_id bigint;
`;

/** See {@link limitedDeclarations}. */
export const limitedPrologue = `BEGIN
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
`;

/** See {@link limitedDeclarations}. */
export const limitedCutAndEnd = `  -- No lock: where pass 0's look ended, if there were more ready jobs than it looked at.
  SELECT j.priority, j.run_at, j.id INTO cut_p, cut_r, cut_id FROM {{schema}}.jobs j
   WHERE j.state = 'pending' AND j.run_at <= now() AND j.task = ANY(tasks)
   ORDER BY j.priority, j.run_at, j.id
   OFFSET budget - 1 LIMIT 1;
  EXIT WHEN NOT FOUND;
  want := n - got;
  END LOOP;
END $$;`;

/**
 * The first CTEs of a pass of the limited claim (migrations 3 and 7): `head`, `deep` and `cand`, the
 * candidate jobs in claim order. Inside claim_jobs_limited: `pass`, `budget`, `want`, `tasks`, `rated`,
 * `limits` and the cut are its variables.
 */
export const limitedCandidates = `  WITH head AS MATERIALIZED (
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
`;

/**
 * The steps of a pass of the limited claim that lock the chosen jobs and lease them (`locked`, `up`),
 * after the CTE `pick` (migrations 3, 7, 8 and 9), with `lease` the SET clause of the UPDATE and `by` how it
 * finds the locked rows.
 */
export const limitedLeaseSteps = (lease: string, by: ClaimTarget = 'id') =>
  by === 'id'
    ? `  locked AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the chosen jobs, re-checked on their newest version: a job another
    -- claim took after this statement's snapshot is no longer pending and is not taken twice. Fewer
    -- jobs than chosen is fine: the counters grow by the jobs actually claimed.
    SELECT j.id FROM {{schema}}.jobs j
     WHERE j.id IN (SELECT id FROM pick) AND j.state = 'pending' AND j.run_at <= now()
       FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       ${lease}
      FROM locked l
     WHERE j.id = l.id
    RETURNING j.*
  ),
`
    : `  locked AS MATERIALIZED (
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
       ${lease}
     ${claimedRows('locked', by)}
    RETURNING j.*
  ),
`;

/** Which clock the rate windows of the limited claim are stamped and checked with. */
export type RateClock =
  /** now(): the claim transaction's start (migrations 3 to 9). */
  | 'statement'
  /**
   * clock_timestamp() taken once after the group and task rows are locked (migration 11): a claim
   * stamped with its statement's start, which can be many milliseconds before it locks the rows (a
   * worker's first claim after a restart plans its statements: ~17 ms), let two processes claim more
   * than the limit within one real-time window.
   */
  | 'locked';

/**
 * The rest of a pass of the limited claim with rate limits (migrations 3, 7, 8, 9 and 11): the groups'
 * and rated tasks' room under their locks, the jobs (leased with `lease`, the SET clause of the UPDATE),
 * the counters and rate logs, and the wait row. `clock`: see {@link RateClock}; with 'locked' the task
 * rows are locked before the groups' room is read, and the clock is taken after both.
 */
export const limitedFullPass = (lease: string, by: ClaimTarget = 'id', clock: RateClock = 'statement') => {
  const at = clock === 'statement' ? 'now()' : '(SELECT locked_at FROM clk)';
  const head = `  cgroups AS MATERIALIZED (
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
`;
  const groom = `  groom AS MATERIALIZED (
    -- Room in each locked group: its free slots, and its free places in the rate window.
    SELECT lg.key, lg.rl, lg.per, v.valid,
           least(lg.conc - lg.running,
                 CASE WHEN lg.rl IS NULL THEN 2147483647 ELSE lg.rl - cardinality(v.valid) END) AS cap
      FROM locked_groups lg,
           LATERAL (SELECT CASE WHEN lg.rl IS NULL THEN '{}'::timestamptz[] ELSE
                      ARRAY(SELECT t FROM unnest(lg.rate_times) AS t WHERE t > ${at} - lg.per ORDER BY t) END AS valid) v
  ),
`;
  const lockedTasks = `  locked_tasks AS MATERIALIZED (
    -- Lock: FOR UPDATE SKIP LOCKED on the rate rows of the rated tasks among the candidates (newest
    -- version, held until this statement ends), for the same reasons as the groups.
    SELECT r.task, r.rate_times, (limits->'tasks'->r.task->>'limit')::int AS rl,
           (limits->'tasks'->r.task->>'perMs')::float8 * interval '1 millisecond' AS per
      FROM {{schema}}.task_rates r
     WHERE r.task = ANY(rated) AND r.task IN (SELECT c.task FROM cand c)
       FOR UPDATE SKIP LOCKED
  ),
`;
  const troom = `  troom AS MATERIALIZED (
    SELECT lt.task, lt.rl, lt.per, v.valid, lt.rl - cardinality(v.valid) AS cap
      FROM locked_tasks lt,
           LATERAL (SELECT ARRAY(SELECT t FROM unnest(lt.rate_times) AS t WHERE t > ${at} - lt.per ORDER BY t) AS valid) v
  ),
`;
  const rooms =
    clock === 'statement'
      ? `${groom}${lockedTasks}${troom}`
      : `${lockedTasks}${LOCKED_CLOCK}${groom}${troom}`;
  return `${head}${rooms}  by_group AS MATERIALIZED (
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
${limitedLeaseSteps(lease, by)}  gu AS (
    -- Lock: the group rows locked above (no wait). The counter grows by this claim's jobs; the rate log
    -- keeps the claim times still in the window plus one per job (never more than the limit's length).
    UPDATE {{schema}}.job_groups g
       SET running = g.running + d.k,
           rate_times = CASE WHEN r.rl IS NULL THEN g.rate_times ELSE r.valid || array_fill(${at}, ARRAY[d.k]) END
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
      JOIN groom r ON r.key = d.group_key
     WHERE g.key = d.group_key
    RETURNING g.key, r.rl, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(${at}, ARRAY[d.k]))[1] AS oldest
  ),
  tu AS (
    -- Lock: the task rate rows locked above (no wait).
    UPDATE {{schema}}.task_rates tr
       SET rate_times = r.valid || array_fill(${at}, ARRAY[d.k])
      FROM (SELECT task, count(*)::int AS k FROM up WHERE task = ANY(rated) GROUP BY task) d
      JOIN troom r ON r.task = d.task
     WHERE tr.task = d.task
    RETURNING tr.task, r.per, r.cap - d.k AS left_after, (r.valid || array_fill(${at}, ARRAY[d.k]))[1] AS oldest
  ),
  waits AS (
    -- No lock. When each rate window that stops a candidate frees its next place: the full ones
    -- skipped above (snapshot read: only a hint for the worker's sleep), the ones this claim filled, and
    -- task windows that were full when locked.
    SELECT g.rate_times[1] + c.per AS at FROM {{schema}}.job_groups g JOIN gcfg c ON c.key = g.key
     WHERE g.key = ANY(ARRAY(SELECT key FROM gcfg WHERE rl IS NOT NULL)) AND c.rl IS NOT NULL AND cardinality(g.rate_times) >= c.rl AND g.rate_times[1] > ${at} - c.per
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
  ${by === 'id' ? 'SELECT u::{{schema}}.jobs, NULL::double precision FROM up u' : `(SELECT u::{{schema}}.jobs, NULL::double precision FROM up u${inClaimOrder(by, 'u.')})`}
  UNION ALL
  SELECT NULL::{{schema}}.jobs, greatest(0, extract(epoch FROM min(w.at) - ${at}) * 1000)::double precision
    FROM waits w HAVING min(w.at) IS NOT NULL;
`;
};

/**
 * The clock of a claim with rate limits (`RateClock` 'locked'): taken once, after every group and task
 * row the claim locks is locked (it reads both lock steps to the end first), so the window a claim
 * checks and the time it stamps are the moment it holds the rows, on the server's clock.
 */
const LOCKED_CLOCK = `  clk AS MATERIALIZED (
    -- No lock. clock_timestamp() once, after the lock steps above have locked all their rows (it
    -- counts them first): every rate window below is checked and stamped with this one time.
    SELECT clock_timestamp() AS locked_at
      FROM (SELECT count(*) FROM locked_groups) g, (SELECT count(*) FROM locked_tasks) r
  ),
`;

/**
 * Queue migration 3: job groups with concurrency and rate limits enforced inside the claim. '{{schema}}'
 * is replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal before it
 * runs. A string constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(groupLimitsMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const groupLimitsMigration = {
  version: 3,
  name: '003_group_limits.sql',
  sql: `
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
${claimJobsOpening(claimLease)}  gl AS MATERIALIZED (
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
${limitedDeclarations}${limitedVariables}${limitedPrologue}  FOR pass IN 0..1 LOOP
  RETURN QUERY
${limitedCandidates}${limitedFullPass(claimLease)}  GET DIAGNOSTICS k = ROW_COUNT;
  got := got + k;
  EXIT WHEN pass = 1 OR got >= n;
${limitedCutAndEnd}
`,
} as const;
