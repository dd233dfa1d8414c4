import { err, ok, type Result } from 'neverthrow';
import { z } from 'zod/v4';
import { InvalidOptions } from '../errors/index.js';
import { toOptionIssues } from '../errors/parse-options.js';
import { durationSchema, timeoutSchema } from './duration.js';
import { DEFAULT_RETRY_ON, RETRYABLE_KINDS } from './retryable.js';

/** Isolation levels accepted by `TxOptions.isolation`. */
export const ISOLATION_LEVELS = ['read committed', 'repeatable read', 'serializable'] as const;

/** Propagation modes accepted by `TxOptions.propagation`. */
export const PROPAGATIONS = ['required', 'nested', 'requiresNew', 'mandatory'] as const;

export { DEFAULT_RETRY_ON, RETRYABLE_KINDS, type RetryableKind } from './retryable.js';

const backoffSchema = z
  .object({
    /** First retry waits up to this long (full jitter: a random delay in [0, base]). Default 10 ms. */
    baseMs: durationSchema.default(10),
    /** No retry waits longer than this. Default 1 s. */
    capMs: durationSchema.default(1000),
  })
  .strict()
  .refine((b) => b.baseMs <= b.capMs, {
    message: 'backoff.baseMs must not exceed backoff.capMs',
    path: ['baseMs'],
  });

const signalSchema = z.custom<AbortSignal>((v) => v instanceof AbortSignal, {
  message: 'must be an AbortSignal',
});

/**
 * THE schema of transaction options (per call, and `defaults` of the manager). Every value that
 * reaches SQL is a validated integer or one of a fixed set of keywords.
 */
export const txOptionsSchema = z
  .object({
    /** Isolation level; default 'read committed' (sent explicitly, whatever the server's default). */
    isolation: z.enum(ISOLATION_LEVELS).default('read committed'),
    /** READ ONLY transaction. Default false (no access mode is sent: the server's default applies). */
    readOnly: z.boolean().default(false),
    /** DEFERRABLE: only with `isolation: 'serializable'` and `readOnly: true` (it waits for a safe snapshot). */
    deferrable: z.boolean().default(false),
    /** `SET LOCAL lock_timeout`: each lock wait gives up after this long with 55P03 (LockNotAvailable). */
    lockTimeout: timeoutSchema.optional(),
    /** `SET LOCAL statement_timeout`: each statement is cancelled after this long (57014, StatementTimeout). */
    statementTimeout: timeoutSchema.optional(),
    /** `SET LOCAL idle_in_transaction_session_timeout`: the server ends the session if the tx idles this long. */
    idleInTransactionTimeout: timeoutSchema.optional(),
    /** Longest wait for a pool client. Default: the pool's own `connectionTimeoutMillis`. */
    acquireTimeout: timeoutSchema.optional(),
    /** Total attempts (first run + retries). Default 5. */
    maxAttempts: z.number().int().min(1).max(100).default(5),
    /** Error kinds that re-run the transaction. Replaces the default list. */
    retryOn: z
      .array(z.enum(RETRYABLE_KINDS))
      .max(RETRYABLE_KINDS.length * 2)
      .default([...DEFAULT_RETRY_ON]),
    /** Exponential backoff with full jitter between attempts. */
    backoff: backoffSchema.prefault({}),
    /** Time budget of the whole call, across attempts (no retry starts that would end after it). */
    deadline: timeoutSchema.optional(),
    /** How this call relates to a transaction already active in the async context. Default 'required'. */
    propagation: z.enum(PROPAGATIONS).default('required'),
    /** A name for logs and hooks. */
    name: z.string().min(1).max(200).optional(),
    /** Aborts waiting and retrying (not a statement already running). */
    signal: signalSchema.optional(),
  })
  .strict()
  .superRefine((o, ctx) => {
    if (o.deferrable && !(o.isolation === 'serializable' && o.readOnly)) {
      ctx.addIssue({
        code: 'custom',
        path: ['deferrable'],
        message: "deferrable needs isolation 'serializable' and readOnly: true (it has no effect otherwise)",
      });
    }
  });

/**
 * Options of `TxManager.do` (and the manager's `defaults`). Durations are a number of milliseconds or
 * a string like `'500ms'`, `'1.5s'`, `'1min'`. Every timeout is at least 1 ms: 0 is refused with
 * `InvalidOptions` (omit the option for no limit).
 *
 * @example
 * const options: TxOptions = { isolation: 'serializable', lockTimeout: '2s', maxAttempts: 8, name: 'transfer' };
 */
export type TxOptions = z.input<typeof txOptionsSchema>;

/** Parsed, complete {@link TxOptions}: defaults applied, durations in integer milliseconds. */
export type TxSettings = z.output<typeof txOptionsSchema>;

/** Isolation level type as parsed. */
export type IsolationLevel = (typeof ISOLATION_LEVELS)[number];

/** Propagation mode. */
export type Propagation = (typeof PROPAGATIONS)[number];

function isPlainRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Own enumerable entries whose value is not `undefined` (so `{ lockTimeout: undefined }` keeps the default). */
function defined(value: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    if (value[key] !== undefined) out[key] = value[key];
  }
  return out;
}

/**
 * Merges per-call options over defaults: per-call values win, `undefined` keeps the default, and
 * `backoff` is merged one level deep. Non-object input is passed through so the schema reports it.
 */
export function mergeTxOptions(defaults: unknown, call: unknown): unknown {
  if (call === undefined || call === null) return defaults ?? {};
  if (!isPlainRecord(call)) return call;
  const base = isPlainRecord(defaults) ? defined(defaults) : {};
  const over = defined(call);
  const merged: Record<string, unknown> = { ...base, ...over };
  if (isPlainRecord(base.backoff) && isPlainRecord(over.backoff)) {
    merged.backoff = { ...defined(base.backoff), ...defined(over.backoff) };
  }
  return merged;
}

export { toOptionIssues };

/**
 * Validates transaction options (per-call merged over `defaults`). Never throws: anything invalid —
 * an unknown isolation, a negative or NaN timeout, `deferrable` without serializable read-only,
 * `maxAttempts: 0`, a string that is not a duration, an unknown key — is an `InvalidOptions` with
 * zod's issues.
 *
 * @example
 * const settings = parseTxOptions({ isolation: 'serializable', lockTimeout: '1s' });
 * if (settings.isOk()) settings.value.lockTimeout; // 1000
 */
export function parseTxOptions(call: unknown, defaults?: unknown): Result<TxSettings, InvalidOptions> {
  try {
    const parsed = txOptionsSchema.safeParse(mergeTxOptions(defaults, call));
    if (parsed.success) return ok(parsed.data);
    return err(new InvalidOptions(toOptionIssues(parsed.error.issues), parsed.error));
  } catch (error) {
    // A hostile input (a throwing getter, a revoked proxy) is still just invalid options.
    return err(new InvalidOptions([{ path: [], message: `unreadable options: ${String(error)}` }], error));
  }
}
