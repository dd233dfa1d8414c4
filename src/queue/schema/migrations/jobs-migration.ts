/**
 * Queue migration 1: the jobs table, its indexes, the retry-delay function and the wake-up trigger.
 * '{{schema}}' is replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel
 * literal before it runs. A string constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(jobsMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const jobsMigration = {
  version: 1,
  name: '001_jobs.sql',
  sql: `
-- pg-txkit queue, migration 1: the jobs table, its indexes, the retry-delay function and the
-- wake-up trigger. '{{schema}}' is replaced by the quoted schema name and '{{channel}}' by the quoted
-- NOTIFY channel literal before this runs (inside migrate()'s transaction, under
-- pg_advisory_xact_lock, so two processes starting at once never apply it twice).

-- The hot table: only pending, running and dead jobs live here. A completed job is deleted (or moved
-- to jobs_archive when the queue is configured with 'archive: true'), so the table and its indexes
-- stay small and the claim query never wades through finished rows.
CREATE TABLE {{schema}}.jobs (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task             text        NOT NULL,
  payload          jsonb       NOT NULL,
  state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'dead')),
  priority         integer     NOT NULL DEFAULT 0,
  run_at           timestamptz NOT NULL DEFAULT now(),
  attempts         integer     NOT NULL DEFAULT 0,
  max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
  backoff_base_ms  integer     NOT NULL DEFAULT 1000,
  backoff_cap_ms   integer     NOT NULL DEFAULT 3600000,
  key              text,
  lease_token      uuid,
  lease_expires_at timestamptz,
  last_error       text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  -- A running job always has a lease; no other state has one.
  CONSTRAINT jobs_lease_iff_running CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Partial index for claimable rows, in the claim's ORDER BY: the claim walks it in order and stops
-- after LIMIT unlocked rows. Running and dead rows are not in it, so they cost the claim nothing.
CREATE INDEX jobs_claimable ON {{schema}}.jobs (priority, run_at, id) WHERE state = 'pending';

-- The reaper's index: running jobs by lease expiry.
CREATE INDEX jobs_leases ON {{schema}}.jobs (lease_expires_at) WHERE state = 'running';

-- Unique job keys, enforced only while a job is live (pending or running): once it is done (deleted)
-- or dead, the same key can be enqueued again. enqueue() targets it with ON CONFLICT … DO NOTHING.
CREATE UNIQUE INDEX jobs_key ON {{schema}}.jobs (task, key)
  WHERE key IS NOT NULL AND state IN ('pending', 'running');

-- Dead jobs, for stats and redrive.
CREATE INDEX jobs_dead ON {{schema}}.jobs (task, id) WHERE state = 'dead';

-- Completed (and cancelled) jobs, only when the queue is configured with 'archive: true'.
CREATE TABLE {{schema}}.jobs_archive (
  id          bigint      PRIMARY KEY,
  task        text        NOT NULL,
  payload     jsonb       NOT NULL,
  state       text        NOT NULL CHECK (state IN ('done', 'cancelled')),
  attempts    integer     NOT NULL,
  key         text,
  last_error  text,
  created_at  timestamptz NOT NULL,
  finished_at timestamptz NOT NULL DEFAULT now()
);

-- Exponential backoff with full jitter and a cap: a uniformly random delay in
-- [0, min(cap, base * 2^(attempts - 1))) milliseconds. One definition used by fail() and the reaper.
CREATE FUNCTION {{schema}}.retry_delay_ms(attempts integer, base_ms integer, cap_ms integer)
  RETURNS double precision LANGUAGE sql VOLATILE PARALLEL SAFE
  AS $$ SELECT random() * least(cap_ms::double precision, base_ms * power(2::double precision, greatest(attempts - 1, 0))) $$;

-- Wake-up: at most ONE notification per INSERT statement (a statement-level trigger, not a row
-- trigger), and only when the statement inserted a job that can run now. NOTIFY is transactional:
-- workers hear it when the enqueuing transaction commits, never for a rolled-back outbox insert.
CREATE FUNCTION {{schema}}.notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM inserted WHERE run_at <= now()) THEN
    PERFORM pg_notify({{channel}}, '');
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify AFTER INSERT ON {{schema}}.jobs
  REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.notify_jobs();
`,
} as const;
