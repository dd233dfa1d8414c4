import type pg from 'pg';

/**
 * Runs `work` in one transaction on a client of its own from `pool`: BEGIN, `work(client)`, COMMIT; on
 * any error ROLLBACK and rethrow. A client whose ROLLBACK failed (its connection is gone) is destroyed
 * instead of going back to the pool. Used by the queue's migrations and its scheduler passes.
 *
 * @example
 * const n = await inClientTransaction(pool, async (c) => (await c.query('SELECT 1')).rowCount);
 */
export async function inClientTransaction<R>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<R>,
): Promise<R> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (e) {
    // A failed ROLLBACK means the connection is gone: destroy the client instead of pooling it.
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    });
    throw e;
  } finally {
    client.release(broken);
  }
}
