import { InvalidOptions } from '../../errors/index.js';
import type { BuilderTransactionOptions } from '../shared/builder-transaction.js';

/**
 * drizzle's BEGIN as its node-postgres session writes it: `begin`, then what `db.transaction(fn, config)`
 * asked for (`isolation level …`, `read only` / `read write`, `deferrable` / `not deferrable`).
 */
const DRIZZLE_BEGIN =
  /^begin(?: isolation level (read uncommitted|read committed|repeatable read|serializable))?(?: (read only|read write))?(?: (deferrable|not deferrable))?$/i;

/** Is `text` drizzle's BEGIN (with or without its transaction config)? */
export function isDrizzleBegin(text: string): boolean {
  return /^begin(?:\s|$)/i.test(text);
}

/**
 * The manager's options for the config of drizzle's `db.transaction(fn, config)`, read back from the
 * BEGIN drizzle wrote (the only place the client sees it). `read uncommitted` is `read committed`
 * (PostgreSQL runs it so). Only what was given is set: the rest comes from the manager's defaults, or
 * from the transaction being joined.
 *
 * @example
 * beginOptions('begin isolation level serializable read only');
 * // → { isolation: 'serializable', readOnly: true }
 */
export function beginOptions(text: string): Omit<BuilderTransactionOptions, 'propagation'> {
  const match = DRIZZLE_BEGIN.exec(text.trim());
  if (match === null) {
    throw new InvalidOptions([
      { path: ['transaction'], message: `unrecognised BEGIN from drizzle: ${JSON.stringify(text)}` },
    ]);
  }
  const [, level, access, deferrable] = match;
  const options: { -readonly [K in keyof BuilderTransactionOptions]: BuilderTransactionOptions[K] } = {};
  if (level !== undefined) {
    const lower = level.toLowerCase();
    options.isolation =
      lower === 'serializable'
        ? 'serializable'
        : lower === 'repeatable read'
          ? 'repeatable read'
          : 'read committed';
  }
  if (access !== undefined) options.readOnly = access.toLowerCase() === 'read only';
  if (deferrable !== undefined) options.deferrable = deferrable.toLowerCase() === 'deferrable';
  return options;
}
