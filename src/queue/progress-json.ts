import type { Result } from 'neverthrow';
import type { InvalidOptions } from '../errors/errors.js';
import { storableJson } from './storable-json.js';

/** Largest progress value stored on a job: 8 KiB of JSON text (progress is a note, not a result). */
const MAX_PROGRESS_BYTES = 8192;

/**
 * The JSON text of a progress value, or `InvalidOptions` (path `progress`) when it is not
 * JSON-serializable, holds text jsonb cannot store, or is larger than 8 KiB as JSON.
 *
 * @example
 * progressJson({ done: 40, total: 100 }); // ok('{"done":40,"total":100}')
 * progressJson('x'.repeat(10_000)).isErr(); // true
 */
export function progressJson(value: unknown): Result<string, InvalidOptions> {
  return storableJson(value, 'progress', 'the progress value', MAX_PROGRESS_BYTES);
}
