/**
 * Queue migration 5: the trace context of the enqueuing span, stored with the job so that its
 * processing spans (every attempt) link to it. '{{schema}}' is replaced by the quoted schema name before
 * it runs. A string constant in the JavaScript: no file is read at run time (bundlers).
 *
 * @example
 * await client.query(traceContextMigration.sql.replaceAll('{{schema}}', '"jobs"'));
 */
export const traceContextMigration = {
  version: 5,
  name: '005_trace_context.sql',
  sql: `
-- pg-txkit queue, migration 5: the W3C trace context (traceparent, tracestate) of the span that
-- enqueued a job, as the propagator wrote it; NULL without OpenTelemetry. Runs inside migrate()'s
-- transaction under pg_advisory_xact_lock.
-- Lock: ACCESS EXCLUSIVE on jobs for an instant. A nullable column without a default is a catalog
-- change only (no table rewrite, no scan), so the lock is held for microseconds once granted; it does
-- wait for running claims and settles to finish, and queues new ones behind it meanwhile.
ALTER TABLE {{schema}}.jobs ADD COLUMN IF NOT EXISTS trace_context jsonb;
`,
};
