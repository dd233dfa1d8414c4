/**
 * A short text for an error stored in a job's `last_error`: `Name: message` for an Error, the string
 * itself, else JSON — and never a throw, whatever the value.
 *
 * @example
 * errorText(new TypeError('bad')); // 'TypeError: bad'
 */
export function errorText(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    // String() itself throws on a null-prototype object (and on a throwing toString): fail() then
    // rejected with a TypeError instead of recording the failure (found by test/property/fuzz-queue).
    try {
      return String(error);
    } catch {
      return Object.prototype.toString.call(error);
    }
  }
}
