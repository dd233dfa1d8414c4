import type pg from 'pg';

/**
 * Is `value` a pool of node-postgres clients (or anything with its `connect`/`query` methods)? Checked
 * by shape, never with `instanceof pg.Pool`: the user's pool may come from another copy or version of
 * pg than the one this package resolves.
 *
 * @example
 * isPool(new pg.Pool()); // → true
 * isPool({ connectionString: 'postgres://…' }); // → false (a client config)
 */
export function isPool(value: unknown): value is pg.Pool {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { connect?: unknown; query?: unknown };
  return typeof v.connect === 'function' && typeof v.query === 'function';
}
