// The steps that take jobs out of 'running' share (the settle statements of queue-sql.ts): giving group
// slots back, counting them per group, archiving. The schema's complete_take_next function was written
// with the same steps and is frozen in migration 0001: a change of behaviour here needs a new migration
// for the function to follow (the migrations import nothing from the runtime, and it nothing from them).

/**
 * The CTEs that give back the group slots of the jobs a settle statement took out of 'running' (`counts`:
 * a relation with one row per group, `group_key` and `k`, the number of its slots to give back), and
 * wake the workers when a group that had a slot freed has ready jobs: with its slots full, the other
 * workers were waiting for this. Lock: FOR UPDATE on those groups IN KEY ORDER (every statement that
 * locks several groups sorts them: two settles sharing groups never deadlock; a claim never waits for a
 * group, it skips it), then the counter UPDATE on the locked rows. They come after the statement's
 * job-row locks. With no slot to give back the key array is empty: nothing is read. The main query must
 * read `slot_wake` (a plain SELECT in WITH runs only when read). The NOTIFY is delivered at COMMIT.
 */
export function freeSlots(groups: string, jobs: string, channel: string, counts: string): string {
  return `,
      slot_locks AS MATERIALIZED (
        SELECT g.key, d.k FROM ${groups} g
          JOIN ${counts} d ON g.key = d.group_key
         ORDER BY g.key
         FOR UPDATE OF g
      ),
      slots AS (
        UPDATE ${groups} g SET running = g.running - l.k
          FROM slot_locks l
         WHERE g.key = l.key
        RETURNING g.key
      ),
      slot_wake AS (
        SELECT pg_notify(${channel}, '') AS woke
         WHERE EXISTS (SELECT 1 FROM slots s WHERE EXISTS (
           SELECT 1 FROM ${jobs} p WHERE coalesce(p.group_key, '') = s.key AND p.state = 'pending' AND p.run_at <= now()))
      )`;
}

/** The slots to give back for the jobs of `from` (a relation with a `group_key` column): one per grouped job. */
export const perGroup = (from: string) =>
  `(SELECT f.group_key, count(*)::int AS k FROM ${from} f WHERE f.group_key IS NOT NULL GROUP BY f.group_key)`;

/**
 * The INSERT that moves settled jobs into the archive table `archive`, with the state `state`, from the
 * relation `from` (the RETURNING of a DELETE: id, task, payload, attempts, key, last_error, created_at,
 * progress). Lock: ROW EXCLUSIVE on the archive table.
 *
 * @example
 * const step = `, archived AS (${archiveInsert('"jobs".jobs_archive', 'done', 'done')})`;
 */
export const archiveInsert = (archive: string, state: 'done' | 'cancelled', from: string) =>
  `INSERT INTO ${archive} (id, task, payload, state, attempts, key, last_error, created_at, progress)
           SELECT id, task, payload, '${state}', attempts, key, last_error, created_at, progress FROM ${from}`;
