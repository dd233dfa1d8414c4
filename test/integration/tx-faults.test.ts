import { err } from 'neverthrow';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { FaultProxy } from '../../src/testing/fault-proxy.js';
import { gate } from '../../src/testing/gate.js';
import type { RollbackEvent } from '../../src/tx/hooks.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean } from './tx-support.js';

const { pool, url } = await useTestDatabase();
const proxy = await FaultProxy.start({ target: url });

/** Resolves the next time a client of the proxied pool is about to send `text`. */
let waitingFor: { text: string; resolve: () => void } | undefined;
function sending(text: string): Promise<void> {
  return new Promise((resolve) => {
    waitingFor = { text, resolve };
  });
}
const proxied: { pool: pg.Pool } = countingPool(proxy.url, 4, (text) => {
  if (waitingFor && text === waitingFor.text) {
    const { resolve } = waitingFor;
    waitingFor = undefined;
    // pg writes the query to the socket synchronously after this returns; resolve on the next turn.
    setImmediate(resolve);
  }
});

beforeAll(async () => {
  await pool.query('CREATE TABLE t (id int PRIMARY KEY, attempt int NOT NULL)');
});

beforeEach(async () => {
  await pool.query('TRUNCATE t');
});

afterEach(async () => {
  proxy.resume();
  await expectClean(proxied.pool, url);
  await expectClean(pool, url);
});

afterAll(async () => {
  await proxied.pool.end();
  await proxy.close();
});

const pidOf = async (tx: { query: pg.Pool['query'] }) =>
  (await tx.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p;

describe('faults (FaultProxy)', () => {
  it('a connection dropped mid-transaction is retried on a new connection; the process survives', async () => {
    const tm = new TxManager(proxied.pool, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    const g = gate();
    const pids: number[] = [];
    const result = tm.do(async (tx) => {
      pids.push((await pidOf(tx as never)) ?? 0);
      await tx.query('INSERT INTO t VALUES (1, $1)', [tx.attempt]);
      if (tx.attempt === 1) await g.at('idle-in-transaction'); // the drop happens while the client is idle
      await tx.query('UPDATE t SET attempt = attempt WHERE id = 1');
      return tx.attempt;
    });
    await g.reached('idle-in-transaction');
    expect(proxy.dropAll()).toBeGreaterThan(0); // the idle client emits 'error': no crash
    g.open('idle-in-transaction');
    expect((await result)._unsafeUnwrap()).toBe(2);
    expect(pids[1]).not.toBe(pids[0]);
    expect((await pool.query('SELECT id, attempt FROM t')).rows).toEqual([{ id: 1, attempt: 2 }]);
  });

  it('a connection lost before COMMIT was sent is retried (the server rolled back)', async () => {
    const g = gate();
    const retried: string[] = [];
    const tm = new TxManager(proxied.pool, {
      defaults: { backoff: { baseMs: 0, capMs: 0 } },
      hooks: { onRetry: (e) => retried.push(e.error.kind) },
    });
    const result = tm.do(async (tx) => {
      await tx.query('INSERT INTO t VALUES (2, $1)', [tx.attempt]);
      if (tx.attempt === 1) await g.at('before-commit');
      return tx.attempt; // no query after the drop: the manager itself sees the dead connection
    });
    await g.reached('before-commit');
    proxy.dropAll();
    g.open('before-commit');
    const outcome = await result;
    if (typeof pg.Client.prototype.getTransactionStatus !== 'function' && outcome.isErr()) {
      // pg before 8.21 learns of the drop only after COMMIT was written to the socket, so it cannot
      // prove COMMIT was not delivered: the safe answer, never retried; the server rolled back.
      expect(outcome.error.kind).toBe('CommitOutcomeUnknown');
      expect(retried).toEqual([]);
      expect((await pool.query('SELECT attempt FROM t WHERE id = 2')).rows).toEqual([]);
      return;
    }
    expect(outcome._unsafeUnwrap()).toBe(2);
    expect(retried).toEqual(['ConnectionLost']);
    expect((await pool.query('SELECT attempt FROM t WHERE id = 2')).rows).toEqual([{ attempt: 2 }]);
  });

  it('a connection lost while COMMIT is in flight gives CommitOutcomeUnknown and is not retried', async () => {
    let calls = 0;
    const tm = new TxManager(proxied.pool, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    const commitSent = sending('COMMIT');
    const result = tm.do(async (tx) => {
      calls++;
      await tx.query('INSERT INTO t VALUES (3, $1)', [tx.attempt]);
      proxy.stall(); // COMMIT will go into a black hole
      return 'done';
    });
    await commitSent;
    proxy.dropAll(); // the answer to COMMIT never arrives
    const error = (await result)._unsafeUnwrapErr();
    expect(error.kind).toBe('CommitOutcomeUnknown');
    expect(calls).toBe(1);
  });

  it('a failed ROLLBACK never hides the original error; the broken client is destroyed', async () => {
    const rollbacks: RollbackEvent[] = [];
    const tm = new TxManager(proxied.pool, { hooks: { onRollback: (e) => rollbacks.push(e) } });
    const rollbackSent = sending('ROLLBACK');
    const original = new ConditionFailed(0);
    const result = tm.do(async (tx) => {
      await tx.query('INSERT INTO t VALUES (4, 1)');
      proxy.stall();
      return err(original);
    });
    await rollbackSent;
    proxy.dropAll();
    expect((await result)._unsafeUnwrapErr()).toBe(original);
    expect(rollbacks).toHaveLength(1);
    expect(rollbacks[0]?.error).toBe(original);
    expect(rollbacks[0]?.rollbackError).toBeInstanceOf(Error);
    expect(original.cause).toBe(rollbacks[0]?.rollbackError); // attached as cause
    expect((await pool.query('SELECT 1 FROM t WHERE id = 4')).rowCount).toBe(0);
  });
});
