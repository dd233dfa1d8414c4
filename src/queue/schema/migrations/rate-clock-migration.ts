import { claimLeasePerClaim } from './claim-steps.js';
import { leanClaimFunctions } from './lean-claim-migration.js';

/**
 * Queue migration 11: the claim functions of migration 9, with the rate windows of the limited claim
 * checked and stamped with one clock taken after the group and task rows are locked. '{{schema}}' is
 * replaced by the quoted schema name before it runs. A string constant in the JavaScript: no file is
 * read at run time (bundlers).
 *
 * @example
 * await client.query(rateClockMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const rateClockMigration = {
  version: 11,
  name: '011_rate_clock_after_lock.sql',
  sql: `
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

${leanClaimFunctions(claimLeasePerClaim, 'tid', 'locked')}`,
} as const;
