import pg from 'pg';
import { TransactionPoolerDetected } from '../../advisory/session-lock.js';
import { detectTransactionPooler, notifyRefused } from '../../capabilities/detect-transaction-pooler.js';
import { Unsupported } from '../../errors/errors.js';
import { fullJitterDelay } from '../../tx/backoff.js';
import { Wakeup } from '../wakeup.js';

/** Options of {@link JobListener}. */
export interface JobListenerOptions {
  /** Connection settings of the LISTEN session (the pool's own `options`: same server, same credentials). */
  readonly connection: pg.ClientConfig;
  /** The NOTIFY channel (unquoted). */
  readonly channel: string;
  /** The channel carrying cancelled running jobs' ids (unquoted); not listened to when absent. */
  readonly cancelChannel?: string | undefined;
  /** Called on every notification, and once after each (re)connection (notifications may have been missed). */
  readonly onWake: () => void;
  /**
   * Called with the job id of each notification on `cancelChannel`. One missed while the session was
   * down is not repeated: the worker's heartbeat finds that lease gone instead.
   */
  readonly onCancel?: ((id: string) => void) | undefined;
  /**
   * Called with each error and what the listener does next: `'reconnect'` after a connection error
   * (with a bounded backoff), `'poll'` when the server or a pooler refuses LISTEN (the listener has
   * stopped; the worker polls).
   */
  readonly onError: (error: unknown, next: 'reconnect' | 'poll') => void;
  /** Called each time LISTEN is in place (first connection and every reconnection). */
  readonly onListening?: (() => void) | undefined;
}

/**
 * The server's refusal of LISTEN ({@link NOTIFY_REFUSED}: an engine without LISTEN/NOTIFY, a hot
 * standby) as {@link Unsupported}, or undefined for any other error. Reconnecting cannot help: the
 * worker polls.
 */
function listenRefused(error: unknown): Unsupported | undefined {
  if (!notifyRefused(error)) return undefined;
  const { code, message } = error as { code?: unknown; message?: unknown };
  return new Unsupported(
    'listenNotify',
    `the server refused LISTEN (${String(code)}: ${String(message)}); the worker polls every pollInterval instead`,
    error,
  );
}

/** Longest pause between two reconnection attempts. */
const MAX_BACKOFF_MS = 5000;

/**
 * The worker's LISTEN session: a connection of its OWN (a `pg.Client` built from the pool's options),
 * never a slot of the user's pool. Held in the pool, it starved a worker on a pool of `max: 1` (common
 * on serverless) — and N workers on a pool of N — of every claim, and `stop()` never returned.
 * Reconnects with a bounded exponential backoff (polling covers the gap); refuses a transaction-mode
 * pooler, where LISTEN "succeeds" on a server connection that then serves other clients.
 *
 * @example
 * const listener = new JobListener({ connection: pool.options, channel: 'jobs', onWake: () => wake(), onError: console.error });
 * listener.start();
 * await listener.stop();
 */
export class JobListener {
  readonly #o: JobListenerOptions;
  readonly #retry = new Wakeup();
  #client: pg.Client | undefined;
  #probe: pg.Client | undefined;
  #listening = false;
  #stopped = false;
  #onStop: () => void = () => {};
  /** Settles when stop() is called: every wait of the loop races it. */
  readonly #stopping = new Promise<void>((resolve) => {
    this.#onStop = resolve;
  });
  #done: Promise<void> = Promise.resolve();

  constructor(options: JobListenerOptions) {
    this.#o = options;
  }

  /** Whether the LISTEN session is up. */
  get listening(): boolean {
    return this.#listening;
  }

  /**
   * Settles when the listener has stopped for good: after stop(), or at once when the server refuses
   * LISTEN (a transaction-mode pooler, an engine without LISTEN, a hot standby: `onError` got one
   * `TransactionPoolerDetected` or `Unsupported`, and the worker polls).
   */
  get finished(): Promise<void> {
    return this.#done;
  }

  /** Starts listening (returns at once; connection errors go to `onError`). */
  start(): void {
    this.#done = this.#loop().catch((e: unknown) => this.#o.onError(e, 'poll'));
  }

  /** Closes the session and stops reconnecting. Always resolves, whatever the connection's state. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#listening = false;
    this.#onStop();
    this.#retry.wake();
    const clients = [this.#client, this.#probe];
    this.#client = undefined;
    this.#probe = undefined;
    // Not awaited: pg's connect() never settles when end() is called while it is connecting (its
    // callback is dropped once the client is ending), so the loop races every wait with stop instead.
    for (const c of clients) void c?.end().catch(() => {});
    await this.#done;
  }

  /** `p`, or a rejection as soon as stop() is called (whichever comes first). */
  #orStop<V>(p: Promise<V>): Promise<V> {
    p.catch(() => {});
    return Promise.race([
      p,
      this.#stopping.then(() => {
        throw new Error('LISTEN stopped');
      }),
    ]);
  }

  #newClient(): pg.Client {
    // keepAlive: a TCP connection cut by a proxy (no FIN) is noticed by the kernel instead of never.
    const client = new pg.Client({ ...this.#o.connection, keepAlive: true });
    // A connection error after start must never be an uncaught 'error' event.
    client.on('error', () => {});
    return client;
  }

  async #loop(): Promise<void> {
    let failures = 0;
    while (!this.#stopped) {
      const client = this.#newClient();
      this.#client = client;
      const lost = new Promise<unknown>((resolve) => {
        client.on('error', resolve);
        client.on('end', () => resolve(new Error('LISTEN connection ended')));
      });
      try {
        await this.#orStop(client.connect());
        // Behind a transaction-mode pooler (PgBouncer …) LISTEN "succeeds" on whichever server
        // connection ran it, and the notifications then go to another client or nowhere: the worker was
        // silently deaf (found by the pgbouncer run of the integration suite, docs/pgbouncer.md). Refuse
        // it clearly and stay poll-only. The probe runs before LISTEN, so LISTEN stays the session's
        // last statement (operators find it in pg_stat_activity).
        const evidence = await this.#orStop(this.#poolerEvidence(client));
        if (evidence !== undefined) {
          if (!this.#stopped)
            this.#o.onError(new TransactionPoolerDetected(evidence, "the queue worker's LISTEN"), 'poll');
          await client.end().catch(() => {});
          return;
        }
        // LISTEN takes no lock; it registers this session for the channel until the session ends.
        // The cancel channel first, so LISTEN on the wake-up channel stays the session's last statement.
        const { cancelChannel, onCancel } = this.#o;
        try {
          if (cancelChannel !== undefined && onCancel !== undefined)
            await this.#orStop(client.query(`LISTEN ${pg.escapeIdentifier(cancelChannel)}`));
          await this.#orStop(client.query(`LISTEN ${pg.escapeIdentifier(this.#o.channel)}`));
        } catch (e) {
          // A refusal (not a lost connection) is reported once; retrying would only repeat it.
          const refused = listenRefused(e);
          if (refused === undefined) throw e;
          if (!this.#stopped) this.#o.onError(refused, 'poll');
          return;
        }
        client.on('notification', (message) => {
          if (message.channel === cancelChannel && onCancel !== undefined) {
            if (message.payload !== undefined) onCancel(message.payload);
          } else this.#o.onWake();
        });
        if (this.#stopped) break;
        this.#listening = true;
        failures = 0;
        this.#o.onListening?.();
        // Notifications may have been missed while (re)connecting.
        this.#o.onWake();
        const why = await Promise.race([lost, this.#stopping]);
        this.#listening = false;
        if (this.#stopped) break;
        this.#o.onError(why, 'reconnect');
      } catch (e) {
        this.#listening = false;
        if (this.#stopped) break;
        this.#o.onError(e, 'reconnect');
      } finally {
        if (this.#client === client) this.#client = undefined;
        void client.end().catch(() => {});
      }
      failures++;
      // Polling covers the gap; reconnect with a bounded full-jitter backoff (the library's one delay
      // formula: many workers reconnecting after a failover do not retry in step), at once on stop.
      await this.#retry.wait(fullJitterDelay(failures, { baseMs: 100, capMs: MAX_BACKOFF_MS }));
    }
  }

  /**
   * Probes the session for a transaction-mode pooler with the library's one probe (as SessionLock and
   * capabilities() do). Returns the evidence, or undefined for a real session.
   */
  async #poolerEvidence(client: pg.Client): Promise<string | undefined> {
    const found = await detectTransactionPooler(
      client,
      async () => {
        const probe = this.#newClient();
        this.#probe = probe;
        try {
          await probe.connect();
        } catch (error) {
          this.#closeProbe(probe);
          throw error;
        }
        return probe;
      },
      async (probe) => this.#closeProbe(probe),
    );
    return found.evidence;
  }

  #closeProbe(probe: pg.Client): void {
    if (this.#probe === probe) this.#probe = undefined;
    void probe.end().catch(() => {});
  }
}
