import type { Result } from 'neverthrow';

/**
 * Is `value` a neverthrow `Result`? Checked by shape (`isOk`, `isErr`, `_unsafeUnwrap` methods), not
 * with `instanceof Ok/Err`: the user's neverthrow may be another copy or version than the one this
 * package resolves, and its Results must still be recognised (an `err` returned from a callback rolls
 * back instead of being committed as a value).
 *
 * @example
 * isResult(ok(1)); // → true
 * isResult({ isOk: true }); // → false
 */
export function isResult(value: unknown): value is Result<unknown, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { isOk?: unknown; isErr?: unknown; _unsafeUnwrap?: unknown };
  return (
    typeof v.isOk === 'function' && typeof v.isErr === 'function' && typeof v._unsafeUnwrap === 'function'
  );
}
