import { AsyncLocalStorage } from 'node:async_hooks';
import type pg from 'pg';
import type { TxSettings } from './tx-options.js';

/** What an async context remembers of its last committed write. */
interface WriteMark {
  /** After this `performance.now()`, the context reads the replica without a check. */
  readonly until: number;
  /**
   * The primary's WAL insert position read after the COMMIT (at or past the commit record), once its
   * query has answered; until then (or when it failed) only the primary is sure to have the write.
   */
  lsn: string | undefined;
}

/** The read-your-writes state of one async context (a request, a job: what awaits one after the other). */
interface ReplicaSession {
  mark: WriteMark | undefined;
}

/**
 * How long a read waits on the replica before it goes to the primary, when neither the replica pool's
 * `connectionTimeoutMillis` nor the call's `acquireTimeout` is set: a replica that stops answering
 * (packets dropped, not refused) would otherwise hold the read until TCP gives up (15 s and more).
 * Long enough for a connection to a healthy replica across a region (a TLS handshake, a few round
 * trips), short enough for a read a user waits on.
 */
export const REPLICA_ANSWER_MS = 2000;

/**
 * After the replica failed to answer within its bound, `readOnly` transactions go straight to the
 * primary for this long instead of each waiting the bound again; then the replica is tried again.
 */
export const REPLICA_COOLDOWN_MS = 5000;

/** Where one attempt of an outermost transaction runs. */
export type Route =
  | { readonly to: 'primary' }
  /** On the replica; with `lsn`, only if the replica's client has replayed it (else on the primary). */
  | { readonly to: 'replica'; readonly lsn?: string | undefined };

/**
 * Sends the `readOnly` transactions of a {@link TxManager} to a read replica (a pool on a hot standby)
 * and keeps read-your-writes in each async context:
 *
 * - read-write transactions, and `serializable` ones even when `readOnly` (a hot standby refuses
 *   serializable: SQLSTATE 0A000), run on the primary;
 * - after a read-write transaction committed in an async context, the primary's WAL insert position is
 *   read (at or past that COMMIT's record; until it has answered, the context reads the primary), and
 *   for `readYourWrites` milliseconds the `readOnly` transactions of the same context first ask their
 *   replica client `pg_last_wal_replay_lsn() >= lsn`: replayed → the replica (and the mark is
 *   dropped), not yet → the primary. After the window, the context reads the replica like any other.
 *
 * "The same async context" is what AsyncLocalStorage propagates: each `do()` gives the caller's
 * context a session of its own (inheriting the mark it saw), so the code after `await tm.do(write)` in
 * the same function — and what it calls — sees the write, and a request started before it does not.
 * Internal to the manager.
 */
export class ReplicaRouter {
  /** The replica's pool. */
  readonly pool: pg.Pool;
  /** The replica pool's own connect (not a strict-mode guard). */
  readonly connect: () => Promise<pg.PoolClient>;
  readonly #windowMs: number | false;
  /** Until this `performance.now()`, the replica is taken as unreachable (see {@link REPLICA_COOLDOWN_MS}). */
  #downUntil = 0;
  readonly #sessions = new AsyncLocalStorage<ReplicaSession>();
  /** The primary pool's unguarded query. */
  readonly #primaryQuery: (text: string) => Promise<pg.QueryResult<{ lsn: string }>>;

  constructor(
    replica: pg.Pool,
    windowMs: number | false,
    primaryQuery: (text: string) => Promise<pg.QueryResult<{ lsn: string }>>,
  ) {
    this.pool = replica;
    const connect = replica.connect as (this: pg.Pool) => Promise<pg.PoolClient>;
    this.connect = () => connect.call(replica);
    this.#windowMs = windowMs;
    this.#primaryQuery = primaryQuery;
  }

  /**
   * Called synchronously by `do()`, in the caller's async context: a session of its own for the rest
   * of that context (the code after `await tm.do(…)` and what it calls), starting from the mark it
   * inherited. A context that started earlier (another request) keeps its own.
   */
  enter(): void {
    if (this.#windowMs === false) return;
    this.#sessions.enterWith({ mark: this.#sessions.getStore()?.mark });
  }

  /** Where an attempt with these settings runs. */
  async route(settings: TxSettings): Promise<Route> {
    if (!settings.readOnly || settings.isolation === 'serializable') return { to: 'primary' };
    if (this.#downUntil !== 0) {
      if (performance.now() < this.#downUntil) return { to: 'primary' };
      this.#downUntil = 0;
    }
    const session = this.#sessions.getStore();
    const mark = session?.mark;
    if (session === undefined || mark === undefined) return { to: 'replica' };
    if (performance.now() > mark.until) {
      session.mark = undefined;
      return { to: 'replica' };
    }
    // The position is not known yet (its query has not answered, or failed): never waited for — a
    // read must not wait on a pool client that the caller may be holding.
    if (mark.lsn === undefined) return { to: 'primary' };
    return { to: 'replica', lsn: mark.lsn };
  }

  /**
   * The longest a read waits for the replica to hand out a client, and then for that client to answer
   * BEGIN: the replica pool's `connectionTimeoutMillis` when it has one, else
   * {@link REPLICA_ANSWER_MS}; never more than the call's own `acquireTimeout`.
   */
  answerMs(acquireTimeoutMs: number | undefined): number {
    const own = (this.pool.options as { connectionTimeoutMillis?: unknown } | undefined)
      ?.connectionTimeoutMillis;
    const bound = typeof own === 'number' && own > 0 ? own : REPLICA_ANSWER_MS;
    return acquireTimeoutMs === undefined ? bound : Math.min(bound, acquireTimeoutMs);
  }

  /** The replica did not answer within its bound: reads go to the primary for {@link REPLICA_COOLDOWN_MS}. */
  unreachable(): void {
    this.#downUntil = performance.now() + REPLICA_COOLDOWN_MS;
  }

  /**
   * Has the replica behind `client` replayed `lsn`? Drops the context's mark when it has (replay only
   * moves forward). 'failed': the client could not answer (destroy it).
   */
  async replayed(
    client: pg.PoolClient,
    lsn: string,
    answerMs: number,
  ): Promise<'replayed' | 'behind' | 'failed'> {
    let ok = false;
    let timer: NodeJS.Timeout | undefined;
    try {
      // Reads the standby's replay position (no lock); NULL on a server that is not a standby.
      const asked = client.query<{ ok: boolean }>(
        'SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false) AS ok',
        [lsn],
      );
      const unanswered = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), answerMs);
      });
      const result = await Promise.race([asked, unanswered]);
      if (result === undefined) {
        // A replica that stopped answering: the client is destroyed, the reads go to the primary.
        asked.catch(() => {});
        this.unreachable();
        return 'failed';
      }
      ok = result.rows[0]?.ok === true;
    } catch {
      return 'failed';
    } finally {
      clearTimeout(timer);
    }
    const session = this.#sessions.getStore();
    if (ok && session !== undefined && session.mark?.lsn === lsn) session.mark = undefined;
    return ok ? 'replayed' : 'behind';
  }

  /** After a read-write transaction committed in this context: remember where its COMMIT is in the WAL. */
  wrote(): void {
    const session = this.#sessions.getStore();
    if (this.#windowMs === false || session === undefined) return;
    const mark: WriteMark = { until: performance.now() + this.#windowMs, lsn: undefined };
    session.mark = mark;
    // Reads the primary's WAL insert position (no lock): at or past the record of the COMMIT just done.
    // Not awaited: the write's caller goes on; a failure leaves the reads of the window on the primary.
    this.#primaryQuery('SELECT pg_current_wal_insert_lsn()::text AS lsn').then(
      (result) => {
        mark.lsn = result.rows[0]?.lsn;
      },
      () => {},
    );
  }
}
