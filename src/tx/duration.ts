import { z } from 'zod/v4';

/** Milliseconds per unit accepted in a duration string. */
const UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  min: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** Largest duration PostgreSQL accepts for its timeout settings (int32 milliseconds). */
export const MAX_DURATION_MS = 2_147_483_647;

const GRAMMAR = /^(\d{1,10}(?:\.\d{1,3})?)(ms|s|min|m|h|d)$/;
const HINT = "use a number of ms, or '500ms', '1.5s', '1m' / '1min', '2h', '7d'";

/** How a duration option is bounded. */
interface DurationBounds {
  /** Smallest accepted value, ms. */
  readonly min: number;
  /** Largest accepted value, ms. */
  readonly max: number;
  /** The message when the value is below `min`. */
  readonly belowMin: string;
}

/** Parses one duration input to whole milliseconds, or undefined when it is not a duration at all. */
function toMs(value: number | string): number | undefined {
  if (typeof value === 'number') return value;
  const match = GRAMMAR.exec(value.trim());
  if (!match?.[1] || !match[2]) return undefined;
  let ms = Number(match[1]) * (UNITS[match[2]] ?? Number.NaN);
  // '1.5s' is 1500 ms; a product off by rounding noise is snapped to the whole millisecond.
  if (Math.abs(ms - Math.round(ms)) < 1e-6) ms = Math.round(ms);
  return ms;
}

/**
 * THE duration parser of the whole API; every option that takes a duration is built with it, so
 * `'1.5s'`, `'1min'`, `'7d'` are accepted or refused the same way everywhere. Only the bounds differ,
 * by what the option means.
 */
function durationWithin(bounds: DurationBounds) {
  return z.union([z.number(), z.string()]).transform((value, ctx): number => {
    const ms = toMs(value);
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: `not a duration: ${JSON.stringify(value)} (${HINT})` });
      return z.NEVER;
    }
    if (!Number.isSafeInteger(ms) || ms > bounds.max || ms < 0) {
      ctx.addIssue({
        code: 'custom',
        message: `a duration must be a whole number of milliseconds between ${bounds.min} and ${bounds.max}`,
      });
      return z.NEVER;
    }
    if (ms < bounds.min) {
      ctx.addIssue({ code: 'custom', message: bounds.belowMin });
      return z.NEVER;
    }
    return ms;
  });
}

/**
 * A duration: whole milliseconds as a number, or a string such as `'500ms'`, `'2s'`, `'1.5s'`, `'1m'`
 * (or `'1min'`), `'1h'`, `'7d'`. Parses to an integer number of milliseconds in `[0, 2147483647]`;
 * anything else (negative, NaN, Infinity, fractions of a millisecond, other units) is a zod issue.
 *
 * @example
 * durationSchema.parse('2s'); // 2000
 * durationSchema.parse(250); // 250
 * durationSchema.safeParse('soon').success; // false
 */
export const durationSchema = durationWithin({
  min: 0,
  max: MAX_DURATION_MS,
  belowMin: 'a duration must not be negative',
});

/**
 * A TIMEOUT: a duration of at least 1 ms. A timeout of 0 is refused everywhere (PostgreSQL reads 0 as
 * "no limit", which nobody writing 0 expects): to wait without a limit, omit the option.
 *
 * @example
 * timeoutSchema.parse('2s'); // 2000
 * timeoutSchema.safeParse(0).success; // false: "… omit the option for no limit"
 */
export const timeoutSchema = durationWithin({
  min: 1,
  max: MAX_DURATION_MS,
  belowMin: 'a timeout must be at least 1 ms (0 is refused; omit the option for no limit)',
});

/**
 * A positive span of time that is not a PostgreSQL setting (a retention, a TTL): at least 1 ms, at
 * most `Number.MAX_SAFE_INTEGER` ms; same grammar as {@link durationSchema}.
 *
 * @example
 * spanSchema.parse('7d'); // 604800000
 */
export const spanSchema = durationWithin({
  min: 1,
  max: Number.MAX_SAFE_INTEGER,
  belowMin: 'a time span must be at least 1 ms',
});

/** A duration input: a number of milliseconds, or a string like `'500ms'`, `'2s'`, `'1min'`, `'7d'`. */
export type Duration = z.input<typeof durationSchema>;
