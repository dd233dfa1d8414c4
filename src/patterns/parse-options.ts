import { err, ok, type Result } from 'neverthrow';
import type { z } from 'zod';
import { InvalidOptions } from '../errors/index.js';

/**
 * Validates `input` with a zod schema: the parsed value, or {@link InvalidOptions} with every issue.
 * Patterns call it before building any SQL, so bad input never reaches the database.
 *
 * @example
 * const parsed = parseOptions(z.object({ n: z.number() }), { n: 'x' });
 * parsed.isErr(); // true, parsed.error.kind === 'InvalidOptions'
 */
export function parseOptions<S extends z.ZodType>(
  schema: S,
  input: unknown,
): Result<z.output<S>, InvalidOptions> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return ok(parsed.data);
  return err(
    new InvalidOptions(
      parsed.error.issues.map((issue) => ({ path: issue.path, message: issue.message, code: issue.code })),
      parsed.error,
    ),
  );
}
