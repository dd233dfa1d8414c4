import { claimLeasePerClaim } from './claim-steps.js';
import { leanClaimFunctions } from './lean-claim-migration.js';

/**
 * Queue migration 9: the claim functions of migration 8, with the lease UPDATE fetching the rows the
 * lock step locked by their address (ctid) instead of joining them on the primary key. '{{schema}}' is
 * replaced by the quoted schema name before it runs. A string constant in the JavaScript: no file is
 * read at run time (bundlers).
 *
 * @example
 * await client.query(claimByTidMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const claimByTidMigration = {
  version: 9,
  name: '009_claim_by_tid.sql',
  sql: `
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

${leanClaimFunctions(claimLeasePerClaim, 'tid')}`,
} as const;
