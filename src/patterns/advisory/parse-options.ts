import { err, ok, type Result } from 'neverthrow';
import type { z } from 'zod';
import { InvalidOptions } from '../../errors/index.js';

/**
 * Validates `input` with a zod schema: the parsed value, or `InvalidOptions` carrying every issue.
 * Internal helper of the advisory module; nothing is sent to the database before it succeeds.
 *
 * @example
 * const parsed = parseOptions(z.object({ n: z.number() }), { n: 1 }); // ok({ n: 1 })
 */
export function parseOptions<S extends z.ZodType>(
  schema: S,
  input: unknown,
): Result<z.output<S>, InvalidOptions> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return ok(parsed.data);
  return err(
    new InvalidOptions(
      parsed.error.issues.map((i) => ({ path: i.path, message: i.message, code: i.code })),
      parsed.error,
    ),
  );
}

/** One-issue `InvalidOptions` for input checked by hand. */
export function invalid(path: readonly PropertyKey[], message: string): InvalidOptions {
  return new InvalidOptions([{ path, message }]);
}
