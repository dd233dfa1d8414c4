import pg from 'pg';

/** A dedicated client (errors after a terminate are expected and swallowed). */
export async function client(url: string, applicationName: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, application_name: applicationName });
  c.on('error', () => {});
  await c.connect();
  return c;
}

/**
 * Polls a monitor query until `pids` all wait on a lock (`pg_blocking_pids` non-empty), bounded in
 * time: the way the isolation tester's monitor tells a step is blocked. Not a sleep to order events.
 */
export async function waitUntilBlocked(monitor: pg.Pool | pg.Client, pids: readonly number[]): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    // pg_blocking_pids reads the lock manager's state; no heavyweight lock.
    const { rows } = await monitor.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM unnest($1::int[]) AS pid WHERE cardinality(pg_blocking_pids(pid)) > 0',
      [pids],
    );
    if (rows[0]?.n === pids.length) return;
    if (Date.now() > deadline) throw new Error(`pids ${pids.join(', ')} did not all block within 15 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Backend pid of a client. */
export async function pidOf(c: pg.Client): Promise<number> {
  const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return rows[0]?.pid as number;
}
