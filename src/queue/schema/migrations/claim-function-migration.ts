import { claimChoose, claimLease } from './claim-steps.js';

/**
 * Queue migration 2: the claim statement as a function with a pinned plan, and autovacuum settings.
 * '{{schema}}' is replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel
 * literal before it runs. A string constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(claimFunctionMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const claimFunctionMigration = {
  version: 2,
  name: '002_claim_function.sql',
  sql: `
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
  WITH ${claimChoose('{{schema}}')}
  UPDATE {{schema}}.jobs j
     ${claimLease}
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
`,
} as const;
