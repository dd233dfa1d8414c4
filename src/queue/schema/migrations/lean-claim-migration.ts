import { type ClaimTarget, claimJobsOpening, claimLease, inClaimOrder } from './claim-steps.js';
import {
  limitedCandidates,
  limitedCutAndEnd,
  limitedDeclarations,
  limitedFullPass,
  limitedLeaseSteps,
  limitedPrologue,
  limitedVariables,
  type RateClock,
} from './group-limits-migration.js';

/**
 * The two claim functions of migration 7 (and, with a token per claim, of migration 8): `claim_jobs`
 * and `claim_jobs_limited`, CREATE OR REPLACE, with `lease` the SET clause of their UPDATE, `by` how
 * it finds the locked rows (by address from migration 9 on) and `clock` the clock of the rate windows
 * (taken after the locks from migration 11 on). Inside a migration's SQL ('{{schema}}' is replaced
 * before it runs).
 */
export function leanClaimFunctions(
  lease: string,
  by: ClaimTarget = 'id',
  clock: RateClock = 'statement',
): string {
  return `${claimJobsOpening(lease, by)}  claimed AS MATERIALIZED (
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
  SELECT * FROM up${inClaimOrder(by, '')}
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
${limitedDeclarations}  -- Whether any group has a rate limit. Without one, and without rated tasks, the claim takes the lean
  -- path below: the limits are concurrency only.
  group_rates constant boolean := (limits->'default'->'rate') IS NOT NULL
    OR EXISTS (SELECT 1 FROM jsonb_each(coalesce(limits->'groups', '{}'::jsonb)) AS e WHERE e.value ? 'rate');
${limitedVariables}${limitedPrologue}  FOR pass IN 0..1 LOOP
  IF cardinality(rated) = 0 AND NOT group_rates THEN
  -- The lean path (concurrency limits only): no rate window to read or write, no wait row.
  RETURN QUERY
${limitedCandidates}  room AS MATERIALIZED (
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
${limitedLeaseSteps(lease, by)}  gu AS (
    -- Lock: the group rows locked in 'room' (no wait): every claimed job's group is one of them.
    UPDATE {{schema}}.job_groups g SET running = g.running + d.k
      FROM (SELECT group_key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key) d
     WHERE g.key = d.group_key
  )
  SELECT u::{{schema}}.jobs, NULL::double precision FROM up u${inClaimOrder(by, 'u.')};
  ELSE
  -- The full path: rate windows of groups and tasks, and the wait row.
  RETURN QUERY
${limitedCandidates}${limitedFullPass(lease, by, clock)}  END IF;
  GET DIAGNOSTICS k = ROW_COUNT;
  -- k counts the full path's wait row too (at most one per pass): pass 1 may ask for one job fewer.
  got := got + k;
  -- Pass 1 is for a head of jobs over their limits (this claim got little or nothing). A pass 0 that
  -- got half of what it asked for made progress: searching group by group for the rest would cost this
  -- claim more than the next claim will.
  EXIT WHEN pass = 1 OR got * 2 >= n;
${limitedCutAndEnd}
`;
}

/**
 * Queue migration 7: the claim functions again, leaner. '{{schema}}' is replaced by the quoted schema
 * name before it runs. A string constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(leanClaimMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const leanClaimMigration = {
  version: 7,
  name: '007_lean_claim.sql',
  sql: `
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

${leanClaimFunctions(claimLease)}`,
} as const;
