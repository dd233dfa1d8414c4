-- pg-txkit queue schema, migration 0008: the one insert into jobs as a function whose plans a connection
-- keeps, without the group and unique-key steps for jobs that have neither.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: enqueue(), enqueueMany() and a schedule pass's ticks sent the insert as one statement of two
-- data-modifying CTEs (the groups' rows, then the jobs with ON CONFLICT on the unique key), unnamed, so
-- the server parsed, analyzed and planned it again at every call: for one job, more than half of the
-- statement's server CPU. Measured (bench/queue/enqueue-variants.mjs, one job per statement, one
-- connection, a LISTEN session connected, the whole server's CPU from /proc, PostgreSQL 18.4, 3
-- interleaved rounds): the statement as sent 437 µs per job (427–440), the same statement prepared once
-- 207 (197–213); an insert without the group CTE, ON CONFLICT and the keyed read 303 (297–310) unnamed,
-- 237 (233–253) inside a plpgsql function; of that, the jobs_notify trigger's NOTIFY 67 (the function
-- with the trigger disabled: 170). graphile-worker's add_job() 553 (530–653) in the same rounds.
-- A plpgsql function keeps each statement's plan for the connection (a new connection, a PgBouncer
-- transaction-mode client included, plans it at its first call), and the statement the client sends
-- is a call of it, parsed in microseconds.
-- The steps a job without a group or a key does not need are left out, with the same result:
-- - the groups' rows are created only when a job has a group (a statement of nothing otherwise, but
--   one that opened job_groups and its index for writing, ROW EXCLUSIVE, at every enqueue);
-- - ON CONFLICT only when a job has a key: a job with key NULL is outside the partial unique index
--   jobs_key (key IS NOT NULL …), so it can never conflict, and without the clause PostgreSQL inserts
--   it directly instead of by speculative insertion (a speculative-insertion lock, a pre-check of the
--   index, and a second WAL record confirming the tuple, per job).
--
-- insert_jobs(task, payloads, priority, run_at, max_attempts, backoff_base_ms, backoff_cap_ms, keys,
-- groups, trace_context, run_ats): the insert of src/queue/store/insert-jobs.ts (its parameters in the
-- same order): one job per element of payloads, with keys[i], groups[i] and coalesce(run_ats[i], run_at,
-- now()); keyed duplicates (a live job of the task with the key, or an earlier element of the same call)
-- are skipped. Returns id, task, state, run_at, key and group_key of each job inserted.
-- Locks: ROW EXCLUSIVE on jobs. With a key, the partial unique index jobs_key is checked by speculative
-- insertion: a concurrent uncommitted insert of the same (task, key) makes it wait for that transaction,
-- then DO NOTHING. With a group, the groups' rows are created if missing (ROW EXCLUSIVE on job_groups;
-- ON CONFLICT DO NOTHING takes no lock on an existing row), in key order: two inserts creating the same
-- new groups wait for each other in one order, never deadlock. Each statement of the function takes its
-- own snapshot in READ COMMITTED (the insert of the jobs does not read the groups' rows). The jobs
-- table's statement-level trigger (jobs_notify) sends at most one NOTIFY per call, delivered at COMMIT.
-- Plans: no step reads a table (unnest of the arguments; the unique index only as ON CONFLICT's
-- arbiter), so a kept generic plan is the same as a fresh one.
-- CREATE FUNCTION takes no lock on the tables.
CREATE FUNCTION {{schema}}.insert_jobs(
    task text, payloads jsonb[], priority integer, run_at timestamptz, max_attempts integer,
    backoff_base_ms integer, backoff_cap_ms integer, keys text[], groups text[], trace_context jsonb,
    run_ats timestamptz[])
  RETURNS TABLE (inserted_id bigint, inserted_task text, inserted_state text, inserted_run_at timestamptz,
                 inserted_key text, inserted_group_key text)
  LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
  IF cardinality(array_remove(insert_jobs.groups, NULL)) > 0 THEN
    INSERT INTO {{schema}}.job_groups (key)
    SELECT DISTINCT g FROM unnest(insert_jobs.groups) AS g WHERE g IS NOT NULL ORDER BY g
    ON CONFLICT (key) DO NOTHING;
  END IF;
  IF cardinality(array_remove(insert_jobs.keys, NULL)) > 0 THEN
    RETURN QUERY
    INSERT INTO {{schema}}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                      backoff_cap_ms, key, group_key, trace_context)
    SELECT insert_jobs.task, t.payload, insert_jobs.priority, coalesce(t.run_at, insert_jobs.run_at, now()),
           insert_jobs.max_attempts, insert_jobs.backoff_base_ms, insert_jobs.backoff_cap_ms, t.key,
           t.group_key, insert_jobs.trace_context
      FROM unnest(insert_jobs.payloads, insert_jobs.keys, insert_jobs.groups, insert_jobs.run_ats)
           WITH ORDINALITY AS t(payload, key, group_key, run_at, n)
     ORDER BY t.n
    ON CONFLICT (task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
    RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key;
  ELSE
    RETURN QUERY
    INSERT INTO {{schema}}.jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                      backoff_cap_ms, key, group_key, trace_context)
    SELECT insert_jobs.task, t.payload, insert_jobs.priority, coalesce(t.run_at, insert_jobs.run_at, now()),
           insert_jobs.max_attempts, insert_jobs.backoff_base_ms, insert_jobs.backoff_cap_ms, NULL,
           t.group_key, insert_jobs.trace_context
      FROM unnest(insert_jobs.payloads, insert_jobs.groups, insert_jobs.run_ats)
           WITH ORDINALITY AS t(payload, group_key, run_at, n)
     ORDER BY t.n
    RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key;
  END IF;
END $$;
