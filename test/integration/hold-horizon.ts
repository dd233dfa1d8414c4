import type pg from 'pg';
import { afterEach } from 'vitest';

/**
 * Registers an afterEach that ends the held snapshot, and returns `holdHorizon`: it holds the MVCC
 * horizon back for the rest of the test, a REPEATABLE READ transaction on a connection of its own that
 * has taken its snapshot (as a long report query, a session idle in transaction or a long pg_dump does).
 *
 * @example
 * const holdHorizon = useHorizonHolder(pool);
 * it('…', async () => { await holdHorizon(); … });
 */
export function useHorizonHolder(pool: pg.Pool): () => Promise<void> {
  let holder: pg.PoolClient | undefined;
  afterEach(async () => {
    await holder?.query('ROLLBACK');
    holder?.release();
    holder = undefined;
  });
  return async () => {
    holder ??= await pool.connect();
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
  };
}
