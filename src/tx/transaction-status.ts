import type pg from 'pg';
import { InvalidOptions } from '../errors/index.js';

/** The pg versions the transaction manager supports (stated in the README and tested). */
export const SUPPORTED_PG = 'pg >=8.11 <9';

/** The server's transaction status after the last query: idle, in a transaction, in a failed one. */
export type TransactionStatus = 'I' | 'T' | 'E';

interface Watched {
  status: TransactionStatus;
}

/**
 * Where a watched client's status lives: on the client itself, under a registered symbol, so that every
 * manager on the pool (and every copy of this library in the process) shares ONE listener per client.
 * A listener per manager and client piled up on long-lived pooled clients when an application made
 * managers as it went (Node warned past 10 per connection, and they were never removed).
 */
const WATCHED = Symbol.for('pg-txkit.transactionStatus');

/** The parts of a pg client the status is read from (newer pg has a method, older pg an event). */
interface StatusSource {
  getTransactionStatus?: () => string | null;
  connection?: { on?: (event: string, listener: (message: { status?: unknown }) => void) => unknown };
  [WATCHED]?: Watched;
}

function isStatus(value: unknown): value is TransactionStatus {
  return value === 'I' || value === 'T' || value === 'E';
}

/**
 * Reads a pg client's transaction status (the last ReadyForQuery's byte) on every pg of
 * {@link SUPPORTED_PG}: `client.getTransactionStatus()` where pg has it (8.21 and later), else the
 * status carried by the protocol's `readyForQuery` message, watched on the client's connection from
 * its first checkout (a pooled idle client is outside any transaction: 'I'). One instance per
 * manager; the status is kept on the client (one listener per client, whatever the number of
 * managers), so it lives and goes with the client.
 *
 * @example
 * const statuses = new TransactionStatuses(pool);
 * statuses.watch(client);
 * await client.query('BEGIN');
 * statuses.of(client); // 'T'
 */
export class TransactionStatuses {
  /**
   * @throws InvalidOptions when the pool's client class can provide neither (a pg older than 8.11,
   * or not pg at all).
   */
  constructor(pool: pg.Pool) {
    const Client = (pool as { Client?: unknown }).Client;
    if (typeof Client !== 'function') return; // a pool-like object: checked per client instead
    const proto = (Client as { prototype?: Record<string, unknown> }).prototype ?? {};
    if (
      typeof proto.getTransactionStatus !== 'function' &&
      typeof proto._handleReadyForQuery !== 'function'
    ) {
      throw new InvalidOptions([
        {
          path: ['pool'],
          message: `the pool's pg client cannot report its transaction status: pg-txkit supports ${SUPPORTED_PG}`,
        },
      ]);
    }
  }

  /**
   * Makes sure the status of `client` can be read; call at checkout.
   *
   * @throws InvalidOptions when neither source exists on this client (an unsupported pg).
   */
  watch(client: pg.PoolClient): void {
    const source = client as unknown as StatusSource;
    if (typeof source.getTransactionStatus === 'function' || source[WATCHED] !== undefined) return;
    const connection = source.connection;
    if (typeof connection?.on !== 'function') {
      throw new InvalidOptions([
        {
          path: ['pool'],
          message: `this pg client reports no transaction status: pg-txkit supports ${SUPPORTED_PG}`,
        },
      ]);
    }
    const watched: Watched = { status: 'I' };
    Object.defineProperty(source, WATCHED, { value: watched, enumerable: false, configurable: true });
    connection.on('readyForQuery', (message) => {
      if (isStatus(message?.status)) watched.status = message.status;
    });
  }

  /** The status after the client's last query (unknown values read as 'T': never "safely idle"). */
  of(client: pg.PoolClient): TransactionStatus {
    const source = client as unknown as StatusSource;
    if (typeof source.getTransactionStatus === 'function') {
      const status = source.getTransactionStatus();
      return isStatus(status) ? status : 'T';
    }
    return source[WATCHED]?.status ?? 'T';
  }
}
