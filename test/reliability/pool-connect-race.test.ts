import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { startTerminatingServer } from '../fixtures/reliability-fake-server.js';

// Found by the mixed workload (an uncaughtException "terminating connection due to administrator
// command" in a worker during a server restart): pg-pool hands a FRESH client out from inside the
// socket parser (on ReadyForQuery) after removing its idle 'error' listener; the caller of
// pool.connect() can only attach its own listener a microtask later, but the parser goes on
// synchronously with the rest of the TCP chunk. A FATAL in that chunk is an 'error' event nobody
// listens to: the process crashes. The fake server sends exactly that chunk, so this is deterministic.
const server = await startTerminatingServer();
afterAll(() => server.close());
const poolOptions = { host: '127.0.0.1', port: server.port, user: 'u', database: 'd', max: 2 };

it('naive control: a client handed out by pool.connect() emits error before anyone can listen', async () => {
  const pool = new pg.Pool(poolOptions);
  pool.on('error', () => {});
  let unheard = 0;
  // Observe (and swallow, so the test process survives) 'error' events emitted with no listener.
  pool.on('acquire', (client) => {
    const emit = client.emit.bind(client);
    client.emit = (event: string | symbol, ...args: unknown[]) => {
      if (event === 'error' && client.listenerCount('error') === 0) {
        unheard++;
        return false;
      }
      return emit(event, ...args);
    };
  });
  const client = await pool.connect();
  client.on('error', () => {}); // too late: the FATAL was already emitted
  client.release(true);
  await pool.end();
  expect(unheard).toBe(1);
});

it('a pool used by a TxManager alone never crashes: the error comes back as a ConnectionLost', async () => {
  const pool = new pg.Pool(poolOptions);
  pool.on('error', () => {});
  const tm = new TxManager(pool);
  const r = await tm.do((tx) => tx.query('SELECT 1'), { maxAttempts: 2, backoff: { baseMs: 1, capMs: 1 } });
  expect(r._unsafeUnwrapErr()).toMatchObject({
    kind: 'RetriesExhausted',
    history: [{ kind: 'ConnectionLost' }, { kind: 'ConnectionLost' }],
  });
  await pool.end();
});

it('a pool used by a Queue (and its TxManager) never crashes: the error comes back as a ConnectionLost from tm.do', async () => {
  const pool = new pg.Pool(poolOptions);
  pool.on('error', () => {});
  const tm = new TxManager(pool);
  new Queue({ pool, txManager: tm, schema: 'q_race', tasks: { t: z.object({}) } });
  new Queue({ pool, txManager: tm, schema: 'q_race2', tasks: { t: z.object({}) } }); // guard installed once
  expect(pool.listeners('connect')).toHaveLength(1); // the guard is installed once per pool
  const r = await tm.do((tx) => tx.query('SELECT 1'), { maxAttempts: 2, backoff: { baseMs: 1, capMs: 1 } });
  expect(r._unsafeUnwrapErr().kind).toBe('RetriesExhausted');
  expect(r._unsafeUnwrapErr()).toMatchObject({
    attempts: 2,
    history: [{ kind: 'ConnectionLost' }, { kind: 'ConnectionLost' }],
  });
  const client = await pool.connect(); // no crash either
  client.release(true);
  await pool.end();
});
