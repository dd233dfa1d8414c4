import { err, ok, type Result } from 'neverthrow';
import { InvalidOptions } from '../errors/errors.js';

/**
 * A payload schema: any Standard Schema (https://standardschema.dev) — zod 3.24+ and 4 (from the user's
 * own copy), valibot, arktype… The queue calls the schema's own `~standard.validate`, never an
 * `instanceof`, so a schema built with another copy or version of the library validates.
 */
export interface PayloadSchema<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** What a Standard Schema's `validate` returns. */
type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | {
      readonly issues: ReadonlyArray<{
        readonly message: string;
        readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
        /** zod's issue code (other libraries may leave it out). */
        readonly code?: unknown;
      }>;
    };

/** The payload type a schema accepts (`enqueue`'s argument). */
export type PayloadInput<S extends PayloadSchema> = S extends PayloadSchema<infer I, unknown> ? I : never;
/** The payload type a schema produces (the handler's `job.payload`). */
export type PayloadOutput<S extends PayloadSchema> = S extends PayloadSchema<unknown, infer O> ? O : never;

/**
 * Is `value` a Standard Schema (structurally: a `~standard` object with a `validate` function)?
 *
 * @example
 * isPayloadSchema(z.object({ to: z.email() })); // → true
 */
export function isPayloadSchema(value: unknown): value is PayloadSchema {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return false;
  const standard = (value as { '~standard'?: unknown })['~standard'];
  return (
    typeof standard === 'object' &&
    standard !== null &&
    typeof (standard as { validate?: unknown }).validate === 'function'
  );
}

function pathOf(path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined) {
  return (path ?? []).map((p) => (typeof p === 'object' && p !== null ? p.key : p));
}

/**
 * Validates a payload with the schema's own `~standard.validate`: the parsed value, or `InvalidOptions`
 * with one issue per problem (paths under `payload`). An asynchronous schema is refused (payloads are
 * checked before any SQL, synchronously).
 *
 * @example
 * const parsed = validatePayload(z.object({ n: z.number() }), { n: 1 }); // → ok({ n: 1 })
 */
export function validatePayload(schema: PayloadSchema, payload: unknown): Result<unknown, InvalidOptions> {
  const result = schema['~standard'].validate(payload);
  if (result instanceof Promise) {
    result.catch(() => {}); // refused below; its outcome is not needed
    return err(
      new InvalidOptions([
        { path: ['payload'], message: 'the task schema validates asynchronously; use a synchronous schema' },
      ]),
    );
  }
  if (result.issues === undefined) return ok(result.value);
  return err(
    new InvalidOptions(
      result.issues.map((i) => ({
        path: ['payload', ...pathOf(i.path)],
        message: i.message,
        ...(typeof i.code === 'string' ? { code: i.code } : {}),
      })),
      result,
    ),
  );
}
