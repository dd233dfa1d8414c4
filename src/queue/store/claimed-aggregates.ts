/**
 * What a claim returns: ONE row of aggregates over the claimed jobs (see `ClaimedRow` in job.ts), so the
 * worker's driver decodes four strings per claim instead of a row of strings per job (a claim of 500
 * jobs was 500 rows). `heads`: per job, the fields that are numbers or a uuid joined by commas (id,
 * priority, run_at, attempts, max_attempts, lease_token, lease_expires_at, created_at; the timestamps
 * as whole epoch milliseconds, floor), the jobs joined by semicolons; none of these columns is NULL in a
 * claimed job (the claim sets the lease), so the positions never shift. `tasks` and `payloads`: JSON
 * arrays. `extras`: per job, NULL or the JSON array of its usually-NULL fields (and, last, whether its
 * payload still has to be validated: a job enqueued from SQL). The aggregates read the
 * function's rows in one pass, so their elements are in the same order. `filter`: a FILTER clause (the
 * limited claim's wait row is not a job). The schema's `complete_take_next` function (frozen in
 * migration 0001) returns its jobs taken over in this shape too, and `claim_jobs_packed` (migration 0008,
 * the worker's plain claim) returns this one row itself; `jobsFromClaim` decodes all three:
 * test/integration/queue-stored-shapes.test.ts calls each stored function on a migrated schema and
 * decodes its result, so a change of this shape that the frozen function does not follow fails there.
 */
const epochMs = (column: string) => `floor(extract(epoch FROM ${column}) * 1000)::bigint`;
const HEAD = `concat_ws(',', j.id, j.priority, ${epochMs('j.run_at')}, j.attempts, j.max_attempts, j.lease_token,
  ${epochMs('j.lease_expires_at')}, ${epochMs('j.created_at')})`;
const EXTRAS = `CASE WHEN j.key IS NOT NULL OR j.last_error IS NOT NULL OR j.progress IS NOT NULL OR j.group_key IS NOT NULL
  OR j.trace_context IS NOT NULL OR NOT j.payload_checked
  THEN json_build_array(j.key, j.last_error, j.progress, j.group_key, j.trace_context, NOT j.payload_checked) END`;
/**
 * The select list of the claim statements' one row (see above).
 *
 * @example
 * const text = `SELECT ${claimedAggregates('')} FROM jobs.claim_jobs($1, $2, $3) AS j`;
 */
export const claimedAggregates = (filter: string) =>
  `string_agg(${HEAD}, ';')${filter} AS heads, json_agg(j.task)${filter} AS tasks,
  json_agg(j.payload)${filter} AS payloads, json_agg(${EXTRAS})${filter} AS extras`;
