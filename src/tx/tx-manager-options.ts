import type pg from 'pg';
import { z } from 'zod/v4';
import type {
  CheckViolation,
  ExclusionViolation,
  ForeignKeyViolation,
  NotNullViolation,
  UniqueViolation,
} from '../errors/index.js';
import { loggerSchema } from '../observability/logger.js';
import { type TelemetryOption, telemetrySchema } from '../observability/otel-api.js';
import { durationSchema } from './duration.js';
import type { TxHooks } from './hooks.js';
import { isPool } from './is-pool.js';
import { RETRY_MODES } from './retryable.js';
import type { TxOptions } from './tx-options.js';

/** The integrity errors that name a constraint, which a {@link ConstraintMap} can translate. */
export type ConstraintViolation =
  | UniqueViolation
  | ExclusionViolation
  | ForeignKeyViolation
  | CheckViolation
  | NotNullViolation;

/**
 * Constraint name → builder of the service's own domain error. `C` maps each constraint name to the
 * error type its builder returns (inferred from the object you pass).
 */
export type ConstraintMap<C extends Record<string, unknown> = Record<string, unknown>> = {
  readonly [K in keyof C]: (violation: ConstraintViolation) => C[K];
};

/** The union of the domain errors built by a constraint map whose error types are `C`. */
export type ConstraintErrors<C extends Record<string, unknown>> = C[keyof C];

const fn = z.custom<(...args: never[]) => unknown>((v) => typeof v === 'function', {
  message: 'must be a function',
});

/** THE schema of the manager's own options (`defaults` are checked with the TxOptions schema). */
export const txManagerOptionsSchema = z
  .object({
    /** Options every `do()` starts from; per-call options are merged over them. */
    defaults: z.record(z.string(), z.unknown()).optional(),
    /** Observability hooks. */
    hooks: z
      .object({
        onRetry: fn.optional(),
        onCommit: fn.optional(),
        onRollback: fn.optional(),
        onSlowTransaction: fn.optional(),
        onCallbackError: fn.optional(),
        onPoolError: fn.optional(),
      })
      .strict()
      .optional(),
    /** A pino-compatible logger: retries (debug), slow transactions (warn), pool and callback errors (error). */
    logger: loggerSchema.optional(),
    /**
     * OpenTelemetry: the `@opentelemetry/api` module (`import * as otel from '@opentelemetry/api'`),
     * `false` for none; by default the installed one is found (none installed: no telemetry).
     */
    telemetry: telemetrySchema.optional(),
    /** Constraint name → domain error builder. */
    constraints: z.record(z.string().min(1), fn).optional(),
    /** Throw when the pool is queried directly while a transaction is active in the same async context. */
    strict: z.boolean().default(false),
    /**
     * How an error raised by COMMIT is read: 'postgres' (default) or 'commit-conflicts' for engines
     * whose every conflict surfaces as 40001 at COMMIT (CockroachDB, Aurora DSQL, YugabyteDB): their
     * ambiguous commit errors become `CommitOutcomeUnknown`. See `RETRY_MODES`.
     */
    retryMode: z.enum(RETRY_MODES).default('postgres'),
    /** An attempt that holds its connection longer than this calls `onSlowTransaction`. Default 1 s. */
    slowTransactionMs: durationSchema.default(1000),
    /**
     * A pool on a read replica (a hot standby): `readOnly` transactions run there, except
     * `serializable` ones (a hot standby refuses serializable), which stay on the primary.
     */
    replica: z.custom<pg.Pool>(isPool, { message: 'must be a pg.Pool' }).optional(),
    /**
     * After a read-write transaction commits in an async context, that context's `readOnly`
     * transactions read the replica only once it has replayed the commit (else the primary), for at
     * most this long. `false`: no read-your-writes. Default 5 s.
     */
    readYourWrites: z.union([z.literal(false), durationSchema]).default(5000),
  })
  .strict();

/**
 * Options of `new TxManager(pool, options)`. The shape is checked at run time by
 * `txManagerOptionsSchema`; the generic `C` lets the constraint map's errors flow into the type
 * of `do()`'s errors.
 *
 * @example
 * const options: TxManagerOptions<{ users_email_key: EmailTaken }> = {
 *   defaults: { isolation: 'read committed', lockTimeout: '2s' },
 *   constraints: { users_email_key: () => new EmailTaken() },
 *   strict: true,
 * };
 */
export type TxManagerOptions<C extends Record<string, unknown> = Record<never, never>> = Omit<
  z.input<typeof txManagerOptionsSchema>,
  'defaults' | 'hooks' | 'constraints' | 'telemetry'
> & {
  readonly telemetry?: TelemetryOption;
  readonly defaults?: TxOptions | undefined;
  readonly hooks?: TxHooks | undefined;
  readonly constraints?: ConstraintMap<C> | undefined;
};
