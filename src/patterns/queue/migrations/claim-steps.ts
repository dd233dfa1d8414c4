/**
 * The two steps every claim function shares (migrations 2 and 3): the choice of the first `n` ready
 * pending jobs of `tasks` in claim order with FOR UPDATE SKIP LOCKED (the CTE `c`), and the UPDATE that
 * leases them (`FROM c`). Inside a function body: `n`, `lease_ms` and `tasks` are its arguments.
 *
 * @example
 * const body = `WITH ${claimChoose('"jobs"')} UPDATE "jobs".jobs j ${claimLease} FROM c WHERE j.id = c.id RETURNING j.*`;
 */
export function claimChoose(schema: string): string {
  return `c AS MATERIALIZED (
    SELECT id FROM ${schema}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  )`;
}

/**
 * The SET clause of the claim's UPDATE in migrations 2, 3 and 7: running, one more attempt, a fresh
 * lease token per job and the expiry.
 */
export const claimLease = `SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()`;

/**
 * The SET clause of the claim's UPDATE from migration 8 on: as {@link claimLease}, with ONE lease token
 * per claim statement (an uncorrelated sub-SELECT is evaluated once), shared by the jobs it claims. A
 * settle is fenced by id and token together, so a token per claim fences as well as one per job: a
 * later claim of the same job draws a new one. gen_random_uuid() reads the strong random source; once
 * per job it was about 2 µs of the server's CPU per job.
 */
export const claimLeasePerClaim = `SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()`;

/**
 * The opening of `claim_jobs` from migration 3 on (CREATE OR REPLACE): its signature and settings, the
 * choice `c` and the UPDATE `up` that leases the chosen jobs with `lease` (its SET clause) and returns
 * them, before the steps that count them in their groups.
 */
export function claimJobsOpening(lease: string): string {
  return `CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH ${claimChoose('{{schema}}')},
  up AS (
    UPDATE {{schema}}.jobs j
       ${lease}
      FROM c
     WHERE j.id = c.id
    RETURNING j.*
  ),
`;
}
