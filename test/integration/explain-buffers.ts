import type pg from 'pg';

/**
 * The shared buffers (hit + read) of `text` with `values` under EXPLAIN (ANALYZE, BUFFERS) on `client`:
 * what the statement read, nested statements of the functions it calls included. With `rolledBack`, it
 * runs in a transaction rolled back after it (a statement that writes can then be measured again on the
 * same rows).
 *
 * @example
 * const read = await explainBuffers(client, 'SELECT * FROM q.claim_jobs($1, 60000, ARRAY[$2])', [10, 'work']);
 */
export async function explainBuffers(
  client: pg.PoolClient,
  text: string,
  values: readonly unknown[],
  o: { rolledBack?: boolean } = {},
): Promise<number> {
  if (o.rolledBack === true) await client.query('BEGIN');
  try {
    const r = await client.query<{ 'QUERY PLAN': { Plan: Record<string, number> }[] }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
      [...values],
    );
    const plan = r.rows[0]?.['QUERY PLAN'][0]?.Plan;
    if (plan === undefined) throw new Error('no plan');
    return (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
  } finally {
    if (o.rolledBack === true) await client.query('ROLLBACK');
  }
}
