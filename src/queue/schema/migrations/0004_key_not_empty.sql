-- pg-txkit queue schema, migration 0004: a job's unique key is never empty.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: enqueue() and <schema>.enqueue() (0003) refuse key = '', but the table accepted it from any other
-- statement (a raw INSERT, an UPDATE, a trigger). A job is enqueued with a non-empty key or with none
-- (NULL): a job holding '' is one that no enqueue() can create or find again by its key, and a handler
-- reading job.key would get a value the API says cannot exist. The table now refuses it from every writer,
-- as 0003 did for an empty group key.

-- The table's rule, for every writer. Added NOT VALID, then validated: ADD CONSTRAINT … NOT VALID takes
-- ACCESS EXCLUSIVE on jobs for the catalog change only (no scan); VALIDATE CONSTRAINT scans the rows
-- under SHARE UPDATE EXCLUSIVE, which alone would not block claims and settles. Here both run in
-- migrate()'s one transaction, so the ACCESS EXCLUSIVE of the first is held until it commits, through
-- the scan: claims and settles wait for one scan of jobs (a queue table holds only live and dead jobs).
-- A schema holding such a row already fails here (23514, nothing applied): move the row
-- (UPDATE … SET key = NULL WHERE key = '') and migrate again.
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_key_not_empty CHECK (key IS NULL OR key <> '') NOT VALID;
ALTER TABLE {{schema}}.jobs VALIDATE CONSTRAINT jobs_key_not_empty;
