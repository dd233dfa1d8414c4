import { createHash } from 'node:crypto';
import pg from 'pg';
import { z } from 'zod/v4';

/** A plain SQL identifier: letters, digits, `_` and `$`, not starting with a digit or `$`, at most 63 bytes. */
const PLAIN = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/**
 * zod schema of a column (or constraint) name. Names are quoted when they reach SQL, so they are
 * case-sensitive: a column created as `Balance` without quotes is `balance`.
 */
export const columnNameSchema = z
  .string()
  .regex(PLAIN, 'must be a plain SQL identifier ([A-Za-z_][A-Za-z0-9_$]*)');

/**
 * zod schema of a row's values: column name → value (insertOnce, upsert, a booking's other columns). A
 * column named `__proto__` is refused with its own message: zod leaves that key out when it copies the
 * record, so its value would have been dropped without a word (found by test/property/patterns-bad-input.test.ts).
 *
 * @example
 * columnValuesSchema.parse({ note: 'hi' }); // { note: 'hi' }
 */
export const columnValuesSchema = z
  .unknown()
  .refine((v) => typeof v !== 'object' || v === null || !Object.hasOwn(v, '__proto__'), {
    message: 'a column named __proto__ cannot be passed in a JavaScript object (its value would be lost)',
  })
  .pipe(z.record(columnNameSchema, z.unknown()));

/** zod schema of a table name, optionally schema-qualified (`billing.wallets`). */
export const tableNameSchema = z.string().refine((s) => {
  const parts = s.split('.');
  return parts.length <= 2 && parts.every((p) => PLAIN.test(p));
}, 'must be a plain SQL identifier, optionally schema-qualified (schema.table)');

/**
 * Quotes a validated identifier for SQL with pg's `escapeIdentifier`; a schema-qualified name is
 * quoted part by part (`billing.wallets` → `"billing"."wallets"`).
 *
 * @example
 * quoteName('billing.wallets'); // '"billing"."wallets"'
 */
export function quoteName(name: string): string {
  return name
    .split('.')
    .map((part) => pg.escapeIdentifier(part))
    .join('.');
}

/** PostgreSQL's identifier limit (NAMEDATALEN - 1): longer names are silently truncated. */
const MAX_IDENTIFIER_BYTES = 63;

/**
 * A name derived from another (`<base>_<suffix>`: an index or constraint named after its table) that
 * fits PostgreSQL's 63-byte limit. When it would not fit, the base is shortened and an 8-hex-digit
 * sha-256 of the full base is added (`<base prefix>_<hash>_<suffix>`), so two long bases with a common
 * prefix still get different names — PostgreSQL would truncate both to the same 63 bytes (a 42P07
 * collision, or an `IF NOT EXISTS` that silently skips). Bases are plain identifiers (ASCII).
 *
 * @example
 * derivedName('room_bookings', 'no_overlap'); // 'room_bookings_no_overlap'
 * derivedName('r'.repeat(63), 'no_overlap'); // 'rrr…r_1a2b3c4d_no_overlap' (63 bytes)
 */
export function derivedName(base: string, suffix: string): string {
  const plain = `${base}_${suffix}`;
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return plain;
  const hash = createHash('sha256').update(base, 'utf8').digest('hex').slice(0, 8);
  const room = MAX_IDENTIFIER_BYTES - hash.length - suffix.length - 2;
  return `${base.slice(0, Math.max(room, 0))}_${hash}_${suffix}`.slice(0, MAX_IDENTIFIER_BYTES);
}
