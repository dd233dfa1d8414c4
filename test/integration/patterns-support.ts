import pg from 'pg';

/** A connected client on `url` (errors after end are ignored). */
export async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** The backend pid of a client. */
export async function pidOf(client: pg.Client): Promise<number> {
  const r = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return r.rows[0]!.pid;
}

/**
 * Waits until backend `pid` is blocked by another session's lock (pg_blocking_pids, polled from a
 * monitor session: the isolation tester's method). Bounded: throws after `limitMs`.
 */
export async function waitUntilBlocked(
  monitor: pg.Client | pg.Pool,
  pid: number,
  limitMs = 10_000,
): Promise<void> {
  const until = Date.now() + limitMs;
  while (Date.now() < until) {
    const r = await monitor.query<{ n: number }>('SELECT cardinality(pg_blocking_pids($1)) AS n', [pid]);
    if ((r.rows[0]?.n ?? 0) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`backend ${pid} never blocked within ${limitMs} ms`);
}

/** Ends clients, ignoring errors. */
export async function endAll(...clients: pg.Client[]): Promise<void> {
  await Promise.all(clients.map((c) => c.end().catch(() => {})));
}

/**
 * Sessions of the test database left idle in a transaction (must be 0 after every test file), and
 * clients still checked out of the pool.
 */
export async function leftovers(pool: pg.Pool): Promise<{ idleInTransaction: number; checkedOut: number }> {
  const r = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
  );
  return { idleInTransaction: r.rows[0]?.n ?? 0, checkedOut: pool.totalCount - pool.idleCount };
}
