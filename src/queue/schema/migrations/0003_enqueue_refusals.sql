-- pg-txkit queue schema, migration 0003: a job's run_at is finite and its group key is never empty.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: <schema>.enqueue() of 0002 accepted run_at => 'infinity' or '-infinity'. Such a job is first (or
-- last) in claim order, and the claim statements turn run_at into epoch milliseconds as a bigint, which
-- fails (0A000) on an infinite timestamp: once a '-infinity' job was pending, EVERY claim of the queue
-- failed. It also accepted group_key => '', the schema's own "no group" value (coalesce(group_key, '')
-- in the claim): a job in group '' took a group slot that nothing gave back. And key => '', which
-- enqueue() refuses. The function now refuses all three, and the table refuses a non-finite run_at and an
-- empty group key from any statement (a raw INSERT, an UPDATE).

-- The table's rules, for every writer. Added NOT VALID, then validated: ADD CONSTRAINT … NOT VALID takes
-- ACCESS EXCLUSIVE on jobs for the catalog change only (no scan); VALIDATE CONSTRAINT scans the rows
-- under SHARE UPDATE EXCLUSIVE, which alone would not block claims and settles. Here both run in
-- migrate()'s one transaction, so the ACCESS EXCLUSIVE of the first is held until it commits, through
-- the scan: claims and settles wait for one scan of jobs (a queue table holds only live and dead jobs).
-- A schema holding such a row already fails here (23514, nothing applied): its claims fail anyway; move
-- the row (UPDATE … SET run_at = now(), group_key = NULL) and migrate again.
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_run_at_finite CHECK (isfinite(run_at)) NOT VALID;
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_group_key_not_empty CHECK (group_key IS NULL OR group_key <> '') NOT VALID;
ALTER TABLE {{schema}}.jobs VALIDATE CONSTRAINT jobs_run_at_finite;
ALTER TABLE {{schema}}.jobs VALIDATE CONSTRAINT jobs_group_key_not_empty;

-- <schema>.enqueue as in 0002, refusing (22023, nothing inserted) a non-finite run_at, an empty
-- group_key and an empty key, before the group's row is created. Same signature: CREATE OR REPLACE keeps
-- the function's grants and takes no lock on the tables.
-- Locks (unchanged): ROW EXCLUSIVE on job_groups (a missing group's row, ON CONFLICT DO NOTHING: no lock
-- on an existing row) and on jobs; with a key, the partial unique index jobs_key by speculative insertion
-- (waits for a concurrent uncommitted insert of the same key, then reads the winner). A keyed job that
-- ended between the insert and the read is retried, at most 5 times, each statement with a new snapshot
-- (read committed; under repeatable read the snapshot cannot move and the function raises).
CREATE OR REPLACE FUNCTION {{schema}}.enqueue(
    task text, payload jsonb, key text DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    priority integer DEFAULT 0, group_key text DEFAULT NULL, max_attempts integer DEFAULT 5,
    backoff_base_ms integer DEFAULT 1000, backoff_cap_ms integer DEFAULT 3600000)
  RETURNS bigint
  LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
  job_id bigint;
BEGIN
  IF enqueue.task IS NULL OR enqueue.task = '' THEN
    RAISE EXCEPTION 'enqueue: task must be a non-empty text' USING ERRCODE = '22023';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'enqueue: payload must not be NULL (use ''{}''::jsonb)' USING ERRCODE = '22023';
  END IF;
  IF NOT isfinite(enqueue.run_at) THEN
    RAISE EXCEPTION 'enqueue: run_at must be a finite time (got %)', enqueue.run_at USING ERRCODE = '22023';
  END IF;
  IF enqueue.group_key = '' THEN
    RAISE EXCEPTION 'enqueue: group_key must be NULL (no group) or a non-empty text' USING ERRCODE = '22023';
  END IF;
  IF enqueue.key = '' THEN
    RAISE EXCEPTION 'enqueue: key must be NULL (no key) or a non-empty text' USING ERRCODE = '22023';
  END IF;
  IF enqueue.group_key IS NOT NULL THEN
    INSERT INTO {{schema}}.job_groups (key) VALUES (enqueue.group_key) ON CONFLICT (key) DO NOTHING;
  END IF;
  FOR attempt IN 1..5 LOOP
    INSERT INTO {{schema}}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                      backoff_cap_ms, key, group_key, payload_checked)
    VALUES (enqueue.task, enqueue.payload, enqueue.priority, coalesce(enqueue.run_at, now()), enqueue.max_attempts,
            enqueue.backoff_base_ms, enqueue.backoff_cap_ms, enqueue.key, enqueue.group_key, false)
    ON CONFLICT (task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
    RETURNING j.id INTO job_id;
    IF job_id IS NOT NULL THEN
      RETURN job_id;
    END IF;
    SELECT j.id INTO job_id FROM {{schema}}.jobs j
     WHERE j.task = enqueue.task AND j.key = enqueue.key AND j.state IN ('pending', 'running');
    IF job_id IS NOT NULL THEN
      RETURN job_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'enqueue: the job holding key % of task % ended while this one was inserted, 5 times',
    enqueue.key, enqueue.task USING ERRCODE = '40001';
END $$;
