-- pg-txkit queue schema, migration 0005: a claim that can start past the index entries left behind by
-- the jobs already claimed.
--
-- FROZEN: never edit this file once released. A change to the schema is a new file.
--
-- It runs inside migrate()'s transaction, under pg_advisory_xact_lock on the schema's key. '{{schema}}' is
-- replaced by the quoted schema name and '{{channel}}' by the quoted NOTIFY channel literal.
--
-- Why: the claim reads jobs_claimable (priority, run_at, id) WHERE state = 'pending' from its front.
-- Claiming a job is not a HOT update (state is in the index's predicate), so it leaves the job's old
-- entry behind, and a new job (run_at = now()) sorts after every such entry. Vacuum, or the claim's own
-- index scan (kill_prior_tuple), removes or marks an entry only once no snapshot can see the pending
-- version any more: while any session holds the MVCC horizon back (a REPEATABLE READ transaction left
-- open, a session idle in transaction, a replication slot, a long pg_dump), nothing does, and every
-- claim walks, and visits the heap for, every job claimed since. Measured (test/integration/
-- queue-claim-floor.test.ts, 5,000 jobs claimed 100 at a time under a held snapshot): a claim that finds
-- nothing read 5 shared buffers after 200 jobs claimed and 146 after 5,000, growing linearly; from the
-- floor, 5 and 7.
--
-- claim_jobs(n, lease_ms, tasks, from_at, from_id): claim_jobs of migration 0001 (step 11), with one more
-- condition, (run_at, id) >= (from_at, from_id). The worker carries the bound (the claim floor, see
-- src/queue/store/claim-floor.ts): a key below which every ready pending job it could claim has been
-- claimed, except the ones a later sweep finds (jobs committed by a transaction that started long
-- before, jobs enqueued with a run_at in the past, a job another statement held locked). from_at
-- '-infinity' is a sweep: the claim from the front, as before. The three-argument claim_jobs stays, for a
-- worker of the previous version still running during a rolling deploy: it becomes that sweep (below).
-- Locks: those of claim_jobs (FOR UPDATE SKIP LOCKED on the chosen pending rows, FOR UPDATE on the
-- groups of the claimed jobs in key order), held until the calling autocommit statement ends.
-- Plan: the ordered index scan of jobs_claimable (enable_sort = off, as claim_jobs), with the row
-- comparison as an index condition. On PostgreSQL 18 the scan skips over the priorities (skip scan) and
-- starts each one at (from_at, from_id): the entries before the floor are never read (measured on a bare
-- table of the same index, 5,000 dead entries before the floor: 6 shared buffers and 2 index searches
-- from the floor, 112 buffers from the front). Before 18, the condition is checked on the index tuples as
-- they are read: the dead entries are still read from the index's leaf pages, but no heap page is visited
-- for them (the test above on 14 and 17: 12 buffers after 200 jobs, 36 after 5,000; 153 from the front).
-- enable_seqscan = off: the lease UPDATE finds the locked rows by address (ctid = ANY(…), a TID scan),
-- but PostgreSQL 18 keeps a SQL function's plan for the connection, and a plan made while the table was
-- nearly empty chose a sequential scan with a filter on ctid, which it then ran for every claim on that
-- connection, reading every page of the table (measured: 163 shared buffers for a claim of nothing, on a
-- table where 5,000 jobs had been claimed under a held snapshot and 200 were left). With sequential scans
-- off the TID scan is the only plan; the other steps were index probes already.
-- CREATE FUNCTION takes no lock on the tables.
CREATE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[],
                                      from_at timestamptz, from_id bigint)
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
  SET enable_sort = off
  SET enable_seqscan = off
AS $$
  WITH c AS MATERIALIZED (
    SELECT ctid AS tid FROM {{schema}}.jobs
     WHERE state = 'pending' AND run_at <= now() AND task = ANY(tasks)
       AND (run_at, id) >= (from_at, from_id)
     ORDER BY priority, run_at, id
     LIMIT n
     FOR UPDATE SKIP LOCKED
  ),
  up AS (
    UPDATE {{schema}}.jobs j
       SET state = 'running', attempts = j.attempts + 1, lease_token = (SELECT gen_random_uuid()),
         lease_expires_at = now() + lease_ms * interval '1 millisecond', updated_at = now()
      WHERE j.ctid = ANY(ARRAY(SELECT tid FROM c))
    RETURNING j.*
  ),
  claimed AS MATERIALIZED (
    SELECT group_key AS key, count(*)::int AS k FROM up WHERE group_key IS NOT NULL GROUP BY group_key
  ),
  gl AS MATERIALIZED (
    -- Lock: FOR UPDATE on the groups of the claimed jobs IN KEY ORDER (primary-key probes, returned in
    -- key order). Waiting for a group row here holds only job rows no other statement waits for (locked
    -- with SKIP LOCKED, not running yet), and a limited claim holding a group never waits: no deadlock.
    SELECT g.key FROM {{schema}}.job_groups g
     WHERE g.key = ANY(ARRAY(SELECT key FROM claimed))
     ORDER BY g.key
     FOR UPDATE OF g
  ),
  gu AS (
    -- The counters of the rows locked in gl (no wait): they grow by the jobs claimed now.
    UPDATE {{schema}}.job_groups g SET running = g.running + c.k FROM claimed c WHERE g.key = c.key
  )
  SELECT * FROM up ORDER BY priority, run_at, id
$$;

-- Whether a ready pending job of `tasks` in a priority after `after_priority` lies in the key range
-- [(from_at, from_id), (to_at, to_id)): the check before a claim floor moves up to the smallest key a
-- claim took (see claim-floor.ts). The claim reads the priorities in order, so one that stopped in
-- priority p never read the later ones: a job waiting there with an older run_at would otherwise fall
-- below the floor. No lock (a snapshot read). Plan: jobs_claimable, an index range scan on the priorities
-- after after_priority (on PostgreSQL 18 a skip scan entering each at from_at); enable_seqscan and
-- enable_bitmapscan off so that stale statistics never turn it into a scan of the table. With one
-- priority in use it reads no entry at all.
CREATE FUNCTION {{schema}}.claim_floor_behind(tasks text[], after_priority integer, from_at timestamptz,
                                              from_id bigint, to_at timestamptz, to_id bigint)
  RETURNS boolean
  LANGUAGE sql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
AS $$
  SELECT EXISTS (
    SELECT 1 FROM {{schema}}.jobs
     WHERE state = 'pending' AND priority > after_priority AND run_at <= now() AND task = ANY(tasks)
       AND (run_at, id) >= (from_at, from_id) AND (run_at, id) < (to_at, to_id))
$$;

-- The three-argument claim of migration 0001, as a sweep of the claim above: one body for both, and a
-- worker of the previous version gets the lease UPDATE's fixed plan too. Same signature: CREATE OR
-- REPLACE keeps the function's grants; no lock on the tables (a claim running meanwhile finishes on the
-- old body). Locks and plan: those of the claim above.
CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(n integer, lease_ms double precision, tasks text[])
  RETURNS SETOF {{schema}}.jobs
  LANGUAGE sql VOLATILE
AS $$
  SELECT * FROM {{schema}}.claim_jobs(n, lease_ms, tasks, '-infinity'::timestamptz, 0::bigint)
$$;
