/**
 * Queue migration 4: recurring schedules — the schedules table (one row per schedule, with its persisted
 * next run) and the declarations table (which definition each deployed version declares, and when it was
 * last declared by a live replica). '{{schema}}' is replaced by the quoted schema name before it runs. A
 * string constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(schedulesMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const schedulesMigration = {
  version: 4,
  name: '004_schedules.sql',
  sql: `
-- pg-txkit queue, migration 4: recurring schedules. Runs inside migrate()'s transaction under
-- pg_advisory_xact_lock; the new tables are invisible to others until it commits.

-- One row per schedule: the definition in force (chosen among the live declarations), and the next tick
-- to fire. A replica fires a due tick by locking this row (FOR UPDATE SKIP LOCKED), inserting the tick's
-- job and moving next_run_at past it in ONE transaction: however many replicas look at once, a tick is
-- enqueued once, and a replica that stops leaves next_run_at for any other one to pick up.
CREATE TABLE {{schema}}.schedules (
  name        text        PRIMARY KEY,
  hash        text        NOT NULL,
  definition  jsonb       NOT NULL,
  enabled     boolean     NOT NULL DEFAULT false,
  next_run_at timestamptz,
  last_tick   timestamptz,
  fired       bigint      NOT NULL DEFAULT 0,
  skipped     bigint      NOT NULL DEFAULT 0,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_enabled_has_next CHECK (NOT enabled OR next_run_at IS NOT NULL)
);

-- The due-schedule scan of every pass: enabled schedules by next run.
CREATE INDEX schedules_due ON {{schema}}.schedules (next_run_at) WHERE enabled;

-- Every definition ever declared, by (schedule, definition hash). first_declared_at orders deploys (the
-- definition first seen most recently is the newest); last_declared_at is refreshed by every replica that
-- still declares it. The definition in force is the newest one some live replica still declares; a
-- schedule no live replica declares any more is disabled. Rows are kept (a few per schedule), so an old
-- version restarting during a deploy overlap is never mistaken for a new deploy.
CREATE TABLE {{schema}}.schedule_declarations (
  name              text        NOT NULL,
  hash              text        NOT NULL,
  definition        jsonb       NOT NULL,
  first_declared_at timestamptz NOT NULL DEFAULT now(),
  last_declared_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (name, hash)
);
`,
} as const;
