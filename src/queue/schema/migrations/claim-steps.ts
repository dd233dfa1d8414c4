/**
 * How a claim's UPDATE finds the rows its lock step locked. `'id'` (migrations 2 to 8): a join on the
 * primary key, which the planner is free to plan, and did plan as a hash join over a sequential scan
 * of the whole jobs table (for claims of 500, with any backlog up to 100,000 jobs; its cost model prices
 * 500 cached index probes above one scan of 100,000 rows). `'tid'` (migration 9 on): the lock step
 * returns each locked row's physical address (ctid) and the UPDATE fetches exactly those rows (a TID
 * scan, the only plan). Safe because the rows are locked by this statement: a locked row version can be
 * neither updated nor deleted by another transaction until this one ends, and VACUUM never moves a live
 * row, so each address still names the row that was locked. (In READ COMMITTED a row updated after the
 * statement's snapshot is locked on its newest version, and the ctid returned is that version's.)
 */
export type ClaimTarget = 'id' | 'tid';

/** The UPDATE's FROM and WHERE that find the rows of the lock step `from` (see {@link ClaimTarget}). */
export function claimedRows(from: string, by: ClaimTarget): string {
  return by === 'id'
    ? `FROM ${from}\n     WHERE j.id = ${from}.id`
    : `WHERE j.ctid = ANY(ARRAY(SELECT tid FROM ${from}))`;
}

/**
 * The ORDER BY of a claim function's result, from migration 9 on: its jobs in claim order. (The UPDATE
 * returned them in the order it found them: by the join's probes of the lock step's rows, in claim
 * order; by address, in the table's physical order.) `prefix`: the alias of the rows, with its dot.
 */
export function inClaimOrder(by: ClaimTarget, prefix: string): string {
  return by === 'id' ? '' : ` ORDER BY ${prefix}priority, ${prefix}run_at, ${prefix}id`;
}

/**
 * The two steps every claim function shares (migrations 2 and 3): the choice of the first `n` ready
 * pending jobs of `tasks` in claim order with FOR UPDATE SKIP LOCKED (the CTE `c`, with `id` or `tid`
 * per {@link ClaimTarget}), and the UPDATE that leases them. Inside a function body: `n`, `lease_ms`
 * and `tasks` are its arguments.
 *
 * @example
 * const body = `WITH ${claimChoose('"jobs"')} UPDATE "jobs".jobs j ${claimLease} FROM c WHERE j.id = c.id RETURNING j.*`;
 */
export function claimChoose(schema: string, by: ClaimTarget = 'id'): string {
  return `c AS MATERIALIZED (
    SELECT ${by === 'id' ? 'id' : 'ctid AS tid'} FROM ${schema}.jobs
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
 * them, before the steps that count them in their groups; `by`: how the UPDATE finds the locked rows.
 */
export function claimJobsOpening(lease: string, by: ClaimTarget = 'id'): string {
  return `CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
AS $$
  WITH ${claimChoose('{{schema}}', by)},
  up AS (
    UPDATE {{schema}}.jobs j
       ${lease}
      ${claimedRows('c', by)}
    RETURNING j.*
  ),
`;
}

/**
 * What a claim returns: ONE row of aggregates over the claimed jobs (see `ClaimedRow` in job.ts), so the
 * worker's driver decodes four strings per claim instead of a row of strings per job (a claim of 500
 * jobs was 500 rows). `heads`: per job, the fields that are numbers or a uuid joined by commas (id,
 * priority, run_at, attempts, max_attempts, lease_token, lease_expires_at, created_at; the timestamps
 * as whole epoch milliseconds, floor), the jobs joined by semicolons; none of these columns is NULL in a
 * claimed job (the claim sets the lease), so the positions never shift. `tasks` and `payloads`: JSON
 * arrays. `extras`: per job, NULL or the JSON array of its usually-NULL fields. The aggregates read the
 * function's rows in one pass, so their elements are in the same order. `filter`: a FILTER clause (the
 * limited claim's wait row is not a job). Migration 10's function returns its jobs taken over in this
 * shape too: the worker decodes both the same way, and a new shape needs a new migration.
 */
const epochMs = (column: string) => `floor(extract(epoch FROM ${column}) * 1000)::bigint`;
const HEAD = `concat_ws(',', j.id, j.priority, ${epochMs('j.run_at')}, j.attempts, j.max_attempts, j.lease_token,
  ${epochMs('j.lease_expires_at')}, ${epochMs('j.created_at')})`;
const EXTRAS = `CASE WHEN j.key IS NOT NULL OR j.last_error IS NOT NULL OR j.progress IS NOT NULL OR j.group_key IS NOT NULL
  OR j.trace_context IS NOT NULL THEN json_build_array(j.key, j.last_error, j.progress, j.group_key, j.trace_context) END`;
export const claimedAggregates = (filter: string) =>
  `string_agg(${HEAD}, ';')${filter} AS heads, json_agg(j.task)${filter} AS tasks,
  json_agg(j.payload)${filter} AS payloads, json_agg(${EXTRAS})${filter} AS extras`;
