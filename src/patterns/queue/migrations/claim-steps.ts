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

/** The SET clause of the claim's UPDATE: running, one more attempt, a fresh lease token and expiry. */
export const claimLease = `SET state = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()`;
