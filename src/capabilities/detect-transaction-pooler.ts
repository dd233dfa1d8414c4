/** The part of a pg client the probe uses (structural: the user's pg may be another copy). */
export interface PidQueryable {
  query<R extends Record<string, unknown>>(text: string): Promise<{ rows: R[] }>;
}

// No lock: the backend pid that serves a session's statement.
const PID_SQL = 'SELECT pg_backend_pid() AS pid';

/**
 * The backend pid serving `client`'s next statement.
 *
 * @example
 * const pid = await backendPid(client);
 */
export async function backendPid(client: PidQueryable): Promise<number> {
  const { rows } = await client.query<{ pid: number }>(PID_SQL);
  return Number(rows[0]?.pid);
}

/** What {@link detectTransactionPooler} found. */
export interface TransactionPoolerProbe {
  /** The backend pid that served the session's first statement. */
  readonly pid: number;
  /** Why the session is taken to go through a transaction-mode pooler; undefined for a real session. */
  readonly evidence: string | undefined;
}

/**
 * THE probe for a transaction-mode (or statement-mode) pooler in front of PostgreSQL — PgBouncer with
 * `pool_mode = transaction`, a provider's `-pooler` endpoint — used by `capabilities()`, `SessionLock`
 * and the queue worker's LISTEN session. Through such a pooler consecutive statements of one client
 * connection may run on different server sessions, and two client connections may share one: session
 * state (a session advisory lock, LISTEN, a session `SET`) stays on a backend that then serves someone
 * else.
 *
 * Asks `session` for its backend pid, opens a second connection with `openProbe` and asks it too
 * (the probe connection is always closed with `closeProbe`), then asks `session` again. Evidence of a
 * pooler: the second connection was served by the same backend, or `session`'s two statements were
 * served by two backends. A direct connection (or a session-mode pooler) shows neither. Three
 * statements of no lock and one short-lived connection; nothing outlives the call.
 *
 * @example
 * const found = await detectTransactionPooler(client, async () => {
 *   const probe = new pg.Client(config);
 *   await probe.connect();
 *   return probe;
 * }, (probe) => probe.end());
 * if (found.evidence) console.log('transaction pooler:', found.evidence);
 */
export async function detectTransactionPooler<P extends PidQueryable>(
  session: PidQueryable,
  openProbe: () => Promise<P>,
  closeProbe: (probe: P) => Promise<void>,
): Promise<TransactionPoolerProbe> {
  const first = await backendPid(session);
  const probe = await openProbe();
  let other: number;
  try {
    other = await backendPid(probe);
  } finally {
    await closeProbe(probe);
  }
  const again = await backendPid(session);
  if (other === first) {
    return { pid: first, evidence: `two separate connections were served by the same backend pid ${first}` };
  }
  if (again !== first) {
    return { pid: first, evidence: `consecutive statements ran on backends ${first} and ${again}` };
  }
  return { pid: first, evidence: undefined };
}
