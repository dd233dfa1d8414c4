import { err, ok, type Result } from 'neverthrow';
import type { InvalidOptions } from '../errors/index.js';
import { invalid } from './parse-options.js';

/**
 * The key that marks a BigInt in a stored result: `{ "$pg-txkit:bigint": "123" }`. JSON has no BigInt
 * (`JSON.stringify` throws on one), so results that hold one are stored with this tag and read back
 * as the same BigInt. An object whose only key is this one is reserved.
 */
const BIGINT_TAG = '$pg-txkit:bigint';
const INTEGER = /^-?\d+$/;

/**
 * The JSON text of a result to store in a jsonb column: lossless for BigInt (tagged, see
 * {@link decodeStoredResult}); `undefined` is stored as null. A value JSON cannot represent (a cycle,
 * a `toJSON` that throws) is `InvalidOptions` at path `result`, never a thrown TypeError.
 *
 * @example
 * encodeStoredResult({ id: 2n ** 70n }); // ok('{"id":{"$pg-txkit:bigint":"1180591620717411303424"}}')
 */
export function encodeStoredResult(value: unknown): Result<string, InvalidOptions> {
  try {
    const json = JSON.stringify(value === undefined ? null : value, (_key, v: unknown) =>
      typeof v === 'bigint' ? { [BIGINT_TAG]: v.toString() } : v,
    );
    return ok(json ?? 'null');
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return err(invalid(['result'], `the result cannot be stored as JSON: ${reason}`));
  }
}

/**
 * A stored result as read from jsonb (already parsed by pg), with the BigInts of
 * {@link encodeStoredResult} restored.
 *
 * @example
 * decodeStoredResult({ id: { '$pg-txkit:bigint': '12' } }); // { id: 12n }
 */
export function decodeStoredResult(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decodeStoredResult);
  if (typeof value !== 'object' || value === null) return value;
  const entries = Object.entries(value);
  const [only] = entries;
  if (
    entries.length === 1 &&
    only?.[0] === BIGINT_TAG &&
    typeof only[1] === 'string' &&
    INTEGER.test(only[1])
  ) {
    return BigInt(only[1]);
  }
  return Object.fromEntries(entries.map(([k, v]) => [k, decodeStoredResult(v)]));
}
