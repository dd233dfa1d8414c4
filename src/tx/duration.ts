import { z } from 'zod/v4';

/** Milliseconds per unit accepted in a duration string. */
const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000 };

/** Largest duration PostgreSQL accepts for its timeout settings (int32 milliseconds). */
export const MAX_DURATION_MS = 2_147_483_647;

/**
 * A duration as the transaction API takes it: whole milliseconds as a number, or a string such as
 * `'500ms'`, `'2s'`, `'1.5s'`, `'1m'`, `'1h'`. Parses to an integer number of milliseconds in
 * `[0, 2147483647]`; anything else (negative, NaN, Infinity, fractions of a millisecond, other units)
 * is a zod issue.
 *
 * @example
 * durationSchema.parse('2s'); // 2000
 * durationSchema.parse(250); // 250
 * durationSchema.safeParse('soon').success; // false
 */
export const durationSchema = z.union([z.number(), z.string()]).transform((value, ctx): number => {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else {
    const match = /^(\d{1,10}(?:\.\d{1,3})?)(ms|s|min|m|h)$/.exec(value.trim());
    if (!match?.[1] || !match[2]) {
      ctx.addIssue({
        code: 'custom',
        message: `not a duration: ${JSON.stringify(value)} (use a number of ms, or '500ms', '2s', '1m')`,
      });
      return z.NEVER;
    }
    ms = Number(match[1]) * (UNITS[match[2]] ?? Number.NaN);
    // '1.5s' is 1500 ms; '1.0005s' is not a whole number of milliseconds after rounding noise.
    if (Math.abs(ms - Math.round(ms)) < 1e-6) ms = Math.round(ms);
  }
  if (!Number.isSafeInteger(ms) || ms < 0 || ms > MAX_DURATION_MS) {
    ctx.addIssue({
      code: 'custom',
      message: `a duration must be a whole number of milliseconds between 0 and ${MAX_DURATION_MS}`,
    });
    return z.NEVER;
  }
  return ms;
});

/** A duration input: a number of milliseconds, or a string like `'500ms'`, `'2s'`, `'1m'`. */
export type Duration = z.input<typeof durationSchema>;
