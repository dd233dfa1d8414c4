import { err, ok, type Result } from 'neverthrow';
import type { InvalidOptions } from '../errors/errors.js';
import type { Job } from './job.js';
import { type PayloadSchema, validatePayload } from './payload-schema.js';

/**
 * A claimed job whose payload was not validated when it was enqueued (enqueued from SQL with
 * `<schema>.enqueue(…)`: it is in `uncheckedPayloads`), checked by its task's schema before it is
 * handed out to run — to its handler by a worker, to the caller by `queue.claim()`. The job comes back
 * with what `enqueue()` would have stored: the JSON of the parsed value (a `z.coerce.date()` field is a
 * string for an enqueued job, so it is one here too). A payload the schema refuses comes back as
 * `InvalidOptions` with the schema's issues (paths under `payload`): the caller fails that job alone,
 * final, since another attempt would read the same payload. Without a schema (a task the queue does not
 * declare) the job comes back as it is.
 *
 * @example
 * const run = uncheckedPayloads.has(job) ? checkedJob(job, tasks[job.task]) : ok(job);
 * if (run.isErr()) console.log(run.error.message); // payload.to: expected string, received number
 */
export function checkedJob(job: Job, schema: PayloadSchema | undefined): Result<Job, InvalidOptions> {
  if (schema === undefined) return ok(job);
  const checked = validatePayload(schema, job.payload);
  if (checked.isErr()) return err(checked.error);
  return ok({ ...job, payload: JSON.parse(JSON.stringify(checked.value)) as unknown });
}
