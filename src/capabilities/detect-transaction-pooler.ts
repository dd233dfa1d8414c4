import { randomBytes } from 'node:crypto';
import { looksLikeDatabaseError } from '../errors/classify.js';

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

/** A notification as the driver hands it over (structural: pg's `Notification`). */
export interface ProbeNotification {
  readonly channel: string;
}

/** The part of a pg client the probe's session uses: statements and its notifications. */
export interface ProbeSession extends PidQueryable {
  on(event: 'notification', listener: (message: ProbeNotification) => void): unknown;
  removeListener(event: 'notification', listener: (message: ProbeNotification) => void): unknown;
}

/** What {@link detectTransactionPooler} found. */
export interface TransactionPoolerProbe {
  /** The backend pid that served the session's first statement. */
  readonly pid: number;
  /** Why the session is taken to go through a transaction-mode pooler; undefined for a real session. */
  readonly evidence: string | undefined;
}

/**
 * How long the session waits for the probe connection's notification. On a real session it arrives
 * within milliseconds of the NOTIFY's commit (the idle backend sends it at once); behind a transaction
 * pooler it never arrives, so this is what refusing such a pooler costs when the backend pids did not
 * already give it away.
 */
export const NOTIFY_ROUND_TRIP_MS = 3000;

/**
 * SQLSTATEs with which a server refuses LISTEN or NOTIFY itself: 0A000 feature_not_supported (an
 * engine without LISTEN/NOTIFY, e.g. CockroachDB), 25006 (a hot standby: "cannot execute LISTEN during
 * recovery"). There the notification step cannot run, and the pid steps are the answer.
 */
export const NOTIFY_REFUSED: ReadonlySet<string> = new Set(['0A000', '25006']);

/** Is `error` the server refusing LISTEN or NOTIFY (not a lost connection)? */
export function notifyRefused(error: unknown): boolean {
  if (!looksLikeDatabaseError(error)) return false;
  const { code } = error as { code?: unknown };
  return typeof code === 'string' && NOTIFY_REFUSED.has(code);
}

/**
 * THE probe for a transaction-mode (or statement-mode) pooler in front of PostgreSQL — PgBouncer with
 * `pool_mode = transaction`, a provider's `-pooler` endpoint — used by `capabilities()`, `SessionLock`
 * and the queue worker's LISTEN session. Through such a pooler consecutive statements of one client
 * connection may run on different server sessions, and two client connections may share one: session
 * state (a session advisory lock, LISTEN, a session `SET`) stays on a backend that then serves someone
 * else.
 *
 * Three steps, each of which a real session (a direct connection or a session-mode pooler) passes:
 * 1. Asks `session` for its backend pid, opens a second connection with `openProbe` and asks it too,
 *    then asks `session` again. Evidence: the second connection was served by the same backend, or
 *    `session`'s two statements were served by two backends. Cheap, but it can pass by chance: when
 *    other clients keep the session's backend busy, the probe is served elsewhere, and the pooler may
 *    hand the session the same backend again.
 * 2. So, when step 1 found nothing: `session` LISTENs on a channel of its own, the probe connection
 *    NOTIFYs it, and `session` waits (idle, sending nothing) up to {@link NOTIFY_ROUND_TRIP_MS} for the
 *    notification. A real session's backend sends it at once. Behind a transaction pooler the LISTEN
 *    stayed on a server connection the session no longer holds, and the notification never reaches it
 *    — whatever the other clients do. Then `session` UNLISTENs.
 *
 * A server that refuses LISTEN or NOTIFY ({@link NOTIFY_REFUSED}: a hot standby, an engine without
 * them) skips step 2. The probe connection is always closed with `closeProbe`; nothing outlives the call.
 * Any other error (a lost connection) is thrown.
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
  session: ProbeSession,
  openProbe: () => Promise<P>,
  closeProbe: (probe: P) => Promise<void>,
): Promise<TransactionPoolerProbe> {
  const first = await backendPid(session);
  const probe = await openProbe();
  try {
    const other = await backendPid(probe);
    const again = await backendPid(session);
    if (other === first) {
      return {
        pid: first,
        evidence: `two separate connections were served by the same backend pid ${first}`,
      };
    }
    if (again !== first) {
      return { pid: first, evidence: `consecutive statements ran on backends ${first} and ${again}` };
    }
    const heard = await notificationArrives(session, probe);
    if (heard === false) {
      return {
        pid: first,
        evidence: `a NOTIFY from a second connection did not reach this connection's LISTEN within ${NOTIFY_ROUND_TRIP_MS} ms`,
      };
    }
    return { pid: first, evidence: undefined };
  } finally {
    await closeProbe(probe);
  }
}

/**
 * Step 2 of {@link detectTransactionPooler}: does a NOTIFY sent on `probe` reach `session`'s LISTEN?
 * Undefined when the server refuses LISTEN or NOTIFY.
 */
async function notificationArrives(session: ProbeSession, probe: PidQueryable): Promise<boolean | undefined> {
  // A channel no one else uses: lowercase hex after a fixed prefix, a valid unquoted identifier.
  const channel = `pg_txkit_probe_${randomBytes(12).toString('hex')}`;
  let arrived: () => void = () => {};
  const delivered = new Promise<true>((resolve) => {
    arrived = () => resolve(true);
  });
  const onNotification = (message: ProbeNotification): void => {
    if (message.channel === channel) arrived();
  };
  session.on('notification', onNotification);
  let timer: NodeJS.Timeout | undefined;
  try {
    try {
      // LISTEN takes no lock: it registers this session for the channel at the statement's commit.
      await session.query(`LISTEN ${channel}`);
    } catch (error) {
      if (notifyRefused(error)) return undefined;
      throw error;
    }
    try {
      // NOTIFY takes no row or table lock. At its commit it holds the server-wide lock that orders
      // notifying commits while it appends to the notification queue, then signals the listeners.
      await probe.query(`NOTIFY ${channel}`);
    } catch (error) {
      if (!notifyRefused(error)) throw error;
      await session.query(`UNLISTEN ${channel}`);
      return undefined;
    }
    // Nothing is sent on `session` while waiting: a statement of its own could land, behind a pooler,
    // on the backend holding the LISTEN and collect the notification there.
    const timedOut = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), NOTIFY_ROUND_TRIP_MS);
      // The session's socket keeps the process alive while it waits; a stopped caller does not.
      timer.unref();
    });
    const heard = await Promise.race([delivered, timedOut]);
    await session.query(`UNLISTEN ${channel}`);
    return heard;
  } finally {
    clearTimeout(timer);
    session.removeListener('notification', onNotification);
  }
}
