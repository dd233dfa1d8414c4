import { err, ok, type Result } from 'neverthrow';
import { InvalidOptions } from '../errors/errors.js';
import { errorText } from './error-text.js';

/**
 * A JSON text (from JSON.stringify) holding an escape jsonb refuses: NUL (`\u0000`, 22P05) or a lone
 * surrogate (`\ud800`, 22P02; JSON.stringify escapes only unpaired surrogates). An escape preceded by
 * an escaped backslash (`\\u0000`) is plain text and does not count.
 */
const NUL_IN_JSON = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/**
 * The JSON text of `value` if jsonb can store it, else an {@link InvalidOptions} at `path` (before any
 * SQL). Refused: what JSON.stringify throws on (a BigInt, a cycle) or turns into nothing (undefined, a
 * function), text holding NUL (U+0000) or a lone surrogate (jsonb refuses both after validation
 * passed), and, with `maxBytes`, a text longer than that in UTF-8.
 *
 * @example
 * storableJson({ done: 3 }, 'progress', 'the progress value', 8192); // ok('{"done":3}')
 * storableJson(10n, 'payload', 'the payload'); // err(InvalidOptions)
 */
export function storableJson(
  value: unknown,
  path: string,
  what: string,
  maxBytes?: number,
): Result<string, InvalidOptions> {
  const invalid = (message: string) => err(new InvalidOptions([{ path: [path], message }]));
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    return invalid(`${what} is not JSON-serializable (${errorText(error)})`);
  }
  if (json === undefined) return invalid(`${what} is not JSON-serializable`);
  if (NUL_IN_JSON.test(json)) {
    return invalid(`a string in ${what} holds NUL (U+0000) or a lone surrogate, which jsonb cannot store`);
  }
  if (maxBytes !== undefined && Buffer.byteLength(json) > maxBytes) {
    return invalid(`${what} is larger than ${maxBytes} bytes as JSON`);
  }
  return ok(json);
}
