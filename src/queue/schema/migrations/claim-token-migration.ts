import { claimLeasePerClaim } from './claim-steps.js';
import { leanClaimFunctions } from './lean-claim-migration.js';

/**
 * Queue migration 8: the claim functions of migration 7 with one lease token per claim statement
 * instead of one per job. '{{schema}}' is replaced by the quoted schema name before it runs. A string
 * constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(claimTokenMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const claimTokenMigration = {
  version: 8,
  name: '008_claim_token.sql',
  sql: `
-- pg-txkit queue, migration 8: claim_jobs and claim_jobs_limited as in migration 7, except that the
-- jobs one claim statement leases share one lease token, drawn once per statement. Every settle,
-- heartbeat and progress write is fenced by the job's id AND its token, so a token per claim fences as
-- well as a token per job: a job claimed again (after a reap, a release or a retry) gets the token of
-- that later claim, and the earlier holder's writes match nothing. gen_random_uuid() reads the strong
-- random source: drawn once per job, it cost about 2 µs of the server's CPU per job.
-- Runs inside migrate()'s transaction under pg_advisory_xact_lock. CREATE OR REPLACE FUNCTION takes no
-- lock on the tables; a claim running meanwhile finishes on the old body, the next one uses the new.
-- The locks are those of migration 7; each step says which lock it takes.

${leanClaimFunctions(claimLeasePerClaim)}`,
} as const;
