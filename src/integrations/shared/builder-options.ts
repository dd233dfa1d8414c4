import { z } from 'zod/v4';
import { parseOptions } from '../../errors/parse-options.js';

/**
 * The options every builder integration takes (one schema): how the builder's own `transaction()`
 * joins a `tm.do` around it.
 */
export const builderOptionsSchema = z
  .object({
    /**
     * `'required'` (default): the builder's transaction is part of the caller's `tm.do` (no SQL);
     * `'nested'`: it gets a savepoint of its own, so its rollback undoes only its work.
     */
    propagation: z.enum(['required', 'nested']).default('required'),
  })
  .strict();

/** The options of a builder integration, as written. */
export type BuilderOptions = z.input<typeof builderOptionsSchema>;
/** The options of a builder integration, with defaults. */
export type BuilderSettings = z.output<typeof builderOptionsSchema>;

/**
 * Parses a builder integration's options; a bad one throws `InvalidOptions` when the builder is set
 * up, before any query.
 *
 * @example
 * builderSettings({ propagation: 'nested' }); // { propagation: 'nested' }
 */
export function builderSettings(options: unknown): BuilderSettings {
  const parsed = parseOptions(builderOptionsSchema, options ?? {});
  if (parsed.isErr()) throw parsed.error;
  return parsed.value;
}
