import { claimedAggregates, claimLeasePerClaim } from './claim-steps.js';
import { archiveInsert, freeSlots, perGroup } from './settle-steps.js';

/**
 * Queue migration 10: the completion that takes over the group slots it frees, as a function
 * (`complete_take_next`) instead of one statement sent by the worker. '{{schema}}' is replaced by the
 * quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal before it runs. A string
 * constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(takeOverFunctionMigration.sql.replaceAll('{{schema}}', '"jobs"').replaceAll('{{channel}}', "'jobs'"));
 */
export const takeOverFunctionMigration = {
  version: 10,
  name: '010_take_over_function.sql',
  sql: `
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
    ${archiveInsert('{{schema}}.jobs_archive', 'done', 'd')} WHERE archive
  ),
  f AS ${perGroup('d')}
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
       ${claimLeasePerClaim}
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
  )${freeSlots('{{schema}}.job_groups', '{{schema}}.jobs', '{{channel}}', 'short')}

  -- One row: the ids completed, the wake-up, and the jobs taken over in claim order, as a claim returns
  -- them (see claimedAggregates).
  SELECT done_ids, (SELECT count(*) FROM slot_wake), ${claimedAggregates('')}
    FROM (SELECT * FROM taken ORDER BY priority, run_at, id) j;
END $$;
`,
} as const;
