import { err, ok, type Result } from 'neverthrow';
import type { z } from 'zod/v4';
import { InvalidOptions, type OptionIssue } from './errors.js';

/** zod's issues as {@link OptionIssue}s. */
export function toOptionIssues(issues: readonly z.core.$ZodIssue[]): OptionIssue[] {
  return issues.map((issue) => ({ path: [...issue.path], message: issue.message, code: issue.code }));
}

/**
 * Validates `input` with a zod schema: the parsed value, or {@link InvalidOptions} carrying every
 * issue. Every module calls it before building any SQL, so bad input never reaches the database. Never
 * throws: a hostile input (a throwing getter, a revoked proxy) is invalid options too.
 *
 * @example
 * const parsed = parseOptions(z.object({ n: z.number() }), { n: 'x' });
 * parsed.isErr(); // true, parsed.error.kind === 'InvalidOptions'
 */
export function parseOptions<S extends z.ZodType>(
  schema: S,
  input: unknown,
): Result<z.output<S>, InvalidOptions> {
  try {
    const parsed = schema.safeParse(input);
    if (parsed.success) return ok(parsed.data);
    return err(new InvalidOptions(toOptionIssues(parsed.error.issues), parsed.error));
  } catch (error) {
    return err(new InvalidOptions([{ path: [], message: `unreadable input: ${String(error)}` }], error));
  }
}

/** A one-issue {@link InvalidOptions} for input checked by hand. */
export function invalid(path: readonly PropertyKey[], message: string): InvalidOptions {
  return new InvalidOptions([{ path, message }]);
}
