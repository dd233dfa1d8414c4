// The transaction status of a pg client without getTransactionStatus() (pg before 8.21): read from the
// protocol's readyForQuery messages, with one listener per client however many managers use the pool.
import { EventEmitter } from 'node:events';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { TransactionStatuses } from '../../src/tx/transaction-status.js';

/** A client of an older pg: no getTransactionStatus, a connection that emits readyForQuery. */
function olderClient() {
  const connection = new EventEmitter();
  return { connection, client: { connection } as unknown as pg.PoolClient };
}

/** A pool whose Client class has the older pg's readyForQuery handler. */
const olderPool = {
  Client: class {
    _handleReadyForQuery(): void {}
  },
} as unknown as pg.Pool;

describe('TransactionStatuses on a pg without getTransactionStatus', () => {
  it('twenty managers watching one client add one listener, and each reads the status', () => {
    const { connection, client } = olderClient();
    const managers = Array.from({ length: 20 }, () => new TransactionStatuses(olderPool));
    for (const m of managers) m.watch(client);
    // Per-manager listeners piled up here (Node warns past 10 on a connection).
    expect(connection.listenerCount('readyForQuery')).toBe(1);
    for (const m of managers) expect(m.of(client)).toBe('I');
    connection.emit('readyForQuery', { status: 'T' });
    for (const m of managers) expect(m.of(client)).toBe('T');
    connection.emit('readyForQuery', { status: 'E' });
    expect(managers[7]?.of(client)).toBe('E');
  });

  it('a client never watched reads as in a transaction (never "safely idle")', () => {
    const { client } = olderClient();
    expect(new TransactionStatuses(olderPool).of(client)).toBe('T');
  });

  it('an unknown status byte is ignored: the last known status stays', () => {
    const { connection, client } = olderClient();
    const statuses = new TransactionStatuses(olderPool);
    statuses.watch(client);
    connection.emit('readyForQuery', { status: 'X' });
    expect(statuses.of(client)).toBe('I');
  });

  it('a pool whose client class reports no status is refused at construction', () => {
    const noStatus = { Client: class {} } as unknown as pg.Pool;
    expect(() => new TransactionStatuses(noStatus)).toThrow(/transaction status/);
  });
});
