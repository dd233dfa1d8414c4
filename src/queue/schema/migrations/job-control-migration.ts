/**
 * Queue migration 6: job control — a `progress` column on jobs and on the archive, and the indexes
 * retention needs (archived jobs by finish time, dead jobs by when they died). '{{schema}}' is replaced
 * by the quoted schema name before it runs. A string constant in the JavaScript: no file is read at run
 * time (bundlers).
 *
 * @example
 * await client.query(jobControlMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const jobControlMigration = {
  version: 6,
  name: '006_job_control.sql',
  sql: `
-- pg-txkit queue, migration 6: job control (progress, retention). Runs inside migrate()'s transaction
-- under pg_advisory_xact_lock; every lock below is held until that transaction commits, so the cheap,
-- strongest ones come last.

-- Retention of the archive: prune() deletes archived jobs finished before a cutoff, oldest first, in
-- bounded batches; this index makes each batch an index range scan instead of a scan of the archive.
-- Lock: SHARE on jobs_archive while the index is built (blocks archiving completions, not claims).
CREATE INDEX jobs_archive_finished ON {{schema}}.jobs_archive (finished_at);

-- Retention of dead jobs: prune({ dead: true }) deletes jobs dead since before a cutoff (updated_at is
-- set when a job dies). Partial: pending and running rows are not in it, so claims and settles never
-- maintain it (a claim's new row version is 'running'). Lock: SHARE on jobs while it is built (the hot
-- table is small: done jobs leave it).
CREATE INDEX jobs_dead_since ON {{schema}}.jobs (updated_at) WHERE state = 'dead';

-- Progress reported by a running handler (ctx.progress): a small JSON value, kept across retries so a
-- new attempt can resume. Nullable without a default: a catalog-only change, no table rewrite.
-- Lock: ACCESS EXCLUSIVE on jobs and jobs_archive for the rest of this (short) transaction.
ALTER TABLE {{schema}}.jobs ADD COLUMN progress jsonb;
ALTER TABLE {{schema}}.jobs_archive ADD COLUMN progress jsonb;
`,
} as const;
