import type pg from 'pg';
import { isPool } from '../tx/is-pool.js';

/** Where a dedicated connection goes: a pool (its connection options are reused), a config, or a URL. */
export type ConnectionTarget = pg.Pool | pg.ClientConfig | string;

/**
 * The `pg.ClientConfig` of a dedicated connection to `target` (a copy: the caller adds its own
 * settings). A pool is told by its shape and its `options` reused — same server, same credentials.
 *
 * @example
 * const client = new pg.Client({ ...connectionConfigOf(pool), application_name: 'leader' });
 */
export function connectionConfigOf(target: ConnectionTarget): pg.ClientConfig {
  if (typeof target === 'string') return { connectionString: target };
  if (isPool(target)) return { ...(target.options as pg.ClientConfig) };
  return { ...target };
}
