import pg from 'pg';

/** A row of the schedules table as the pass reads it. */
export interface ScheduleRow {
  name: string;
  hash: string;
  definition: unknown;
  enabled: boolean;
  next_run_at: Date | null;
  last_tick: Date | null;
}

/** Every statement a schedule pass sends, built once per schema. Each says which locks it takes and why. */
export interface ScheduleStatements {
  readonly declare: string;
  readonly placeholders: string;
  readonly lockAll: string;
  readonly lockDue: string;
  readonly anyDue: string;
  readonly winners: string;
  readonly disable: string;
  readonly redefine: string;
  readonly advance: string;
  readonly list: string;
}

/** Builds the {@link ScheduleStatements} of a queue schema (identifiers quoted, values parameters). */
export function scheduleStatements(schema: string): ScheduleStatements {
  const s = pg.escapeIdentifier(schema);
  // Live: refreshed within liveness ($1, ms) by the pass transaction's clock, or declared by this very
  // pass ($names, $hashes: its own declarations are live whatever the clock says). The pass's now() is
  // later than its own autocommit declaration; a pass that waited for a lock or a pool client longer than
  // liveness disabled the schedules it had just declared, and no worker fired them until its next
  // declaring pass.
  const live = (names: string, hashes: string) =>
    `(last_declared_at > now() - $1::double precision * interval '1 millisecond'
       OR (name, hash) IN (SELECT * FROM unnest(${names}::text[], ${hashes}::text[])))`;
  return {
    // Lock: ROW EXCLUSIVE on schedule_declarations; ON CONFLICT DO UPDATE row-locks this version's own
    // declaration rows until the (autocommit) statement ends. Rows sorted by key, so two replicas of one
    // version declaring at once wait for each other instead of deadlocking.
    declare: `
      INSERT INTO ${s}.schedule_declarations (name, hash, definition)
      SELECT name, hash, definition FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS d(name, hash, definition)
       ORDER BY name, hash
      ON CONFLICT (name, hash) DO UPDATE SET last_declared_at = now()`,
    // Lock: ROW EXCLUSIVE on schedules. A row for each schedule some live replica declares and that has no
    // row yet (disabled, empty definition: the reconcile step below fills it in). A concurrent insert of
    // the same name waits for the other transaction, then does nothing; names in order, no deadlock.
    placeholders: `
      INSERT INTO ${s}.schedules (name, hash, definition)
      SELECT DISTINCT name, '', '{}'::jsonb FROM ${s}.schedule_declarations WHERE ${live('$2', '$3')}
       ORDER BY name
      ON CONFLICT (name) DO NOTHING`,
    // Lock: FOR UPDATE on every schedule row no other pass holds; SKIP LOCKED: a row another replica is
    // reconciling or firing right now is left to it (it will be looked at again on the next pass). Held
    // until this pass's COMMIT, so nobody fires or redefines these schedules meanwhile.
    lockAll: `
      SELECT name, hash, definition, enabled, next_run_at, last_tick FROM ${s}.schedules
       ORDER BY name FOR UPDATE SKIP LOCKED`,
    // Lock: FOR UPDATE on due enabled schedules (partial index schedules_due), SKIP LOCKED as above: of
    // replicas passing at once, each due schedule is fired by exactly one of them.
    lockDue: `
      SELECT name, hash, definition, enabled, next_run_at, last_tick FROM ${s}.schedules
       WHERE enabled AND next_run_at <= now()
       ORDER BY next_run_at LIMIT 100 FOR UPDATE SKIP LOCKED`,
    // Lock: none (a plain read on the partial index): whether a pass has anything to fire, so an idle
    // scheduler costs one cheap statement per interval and no transaction.
    anyDue: `SELECT EXISTS (SELECT 1 FROM ${s}.schedules WHERE enabled AND next_run_at <= now()) AS due`,
    // Lock: none (a plain read). The definition in force per schedule: the newest deploy (first declared
    // most recently) among those a live replica still declares; ties broken by hash.
    winners: `
      SELECT DISTINCT ON (name) name, hash, definition FROM ${s}.schedule_declarations
       WHERE ${live('$3', '$4')} AND name = ANY($2::text[])
       ORDER BY name, first_declared_at DESC, hash`,
    // Lock: the schedule's row, already locked FOR UPDATE by this pass.
    disable: `UPDATE ${s}.schedules SET enabled = false, next_run_at = NULL, updated_at = now() WHERE name = $1`,
    // Lock: the schedule's row, already locked FOR UPDATE by this pass. A definition with no tick left
    // (a cron whose year field ended) is stored disabled, with no next run.
    redefine: `
      UPDATE ${s}.schedules SET hash = $2, definition = $3::jsonb, enabled = ($4::timestamptz IS NOT NULL),
             next_run_at = $4, updated_at = now()
       WHERE name = $1`,
    // Lock: the schedule's row, already locked FOR UPDATE by this pass. No next tick (a cron whose year
    // field ended): disabled, with no next run (the CHECK ties an enabled schedule to its next run).
    advance: `
      UPDATE ${s}.schedules SET next_run_at = $2, enabled = ($2::timestamptz IS NOT NULL), last_tick = coalesce($3, last_tick), fired = fired + $4, skipped = skipped + $5,
             updated_at = now()
       WHERE name = $1`,
    // Lock: none (a plain read).
    list: `
      SELECT name, hash, definition, enabled, next_run_at, last_tick, fired::float8 AS fired,
             skipped::float8 AS skipped
        FROM ${s}.schedules ORDER BY name`,
  };
}
