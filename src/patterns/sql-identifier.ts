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
