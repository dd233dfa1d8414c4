import { err } from 'neverthrow';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { useTestDatabase } from '../helpers.js';
import { expectClean } from './tx-support.js';

const { pool, url } = await useTestDatabase();
const noBackoff = { backoff: { baseMs: 0, capMs: 0 } } as const;

beforeAll(async () => {
  await pool.query('CREATE TABLE m (id int PRIMARY KEY, note text)');
});

beforeEach(async () => {
  await pool.query('TRUNCATE m');
});

afterAll(async () => {
  await expectClean(pool, url);
});

const count = async (): Promise<number> =>
  (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM m')).rows[0]?.n ?? -1;

describe('only the driver errors of this transaction are classified', () => {
  const notFromTheDatabase: [string, () => unknown][] = [
    [
      'an HTTP client error with code ECONNRESET',
      () => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
    ],
    [
      'an error with code ETIMEDOUT',
      () => Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT' }),
    ],
    ['an error with code ECONNABORTED', () => Object.assign(new Error('aborted'), { code: 'ECONNABORTED' })],
    ['a message containing "timeout expired"', () => new Error('upstream: timeout expired')],
    [
      'a message containing "Connection terminated"',
      () => new Error('Connection terminated by the payment API'),
    ],
    ['a plain object carrying SQLSTATE 40001', () => ({ code: '40001', message: 'not from pg' })],
    ['an Error carrying SQLSTATE 40P01', () => Object.assign(new Error('mine'), { code: '40P01' })],
  ];
  it.each(notFromTheDatabase)(
    '%s thrown by the callback runs it once and rejects unchanged',
    async (_, make) => {
      const tm = new TxManager(pool, { defaults: noBackoff });
      const thrown = make();
      let calls = 0;
      const outcome = await tm
        .do(async (tx) => {
          calls++;
          await tx.query('INSERT INTO m VALUES ($1)', [calls]);
          throw thrown;
        })
        .then(
          (value) => ({ value }),
          (error: unknown) => ({ error }),
        );
      expect(calls).toBe(1);
      expect(outcome).toEqual({ error: thrown });
      expect((outcome as { error: unknown }).error).toBe(thrown);
      expect(await count()).toBe(0);
    },
  );

  it('a real 40001 raised by the server for this transaction is still retried', async () => {
    const tm = new TxManager(pool, { defaults: noBackoff });
    let calls = 0;
    const result = await tm.do(async (tx) => {
      calls++;
      if (calls === 1) {
        await tx.query("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$");
      }
      return calls;
    });
    expect(result._unsafeUnwrap()).toBe(2);
  });
});

describe('client-side query_timeout', () => {
  it('is not retried, comes back as QueryTimeout, and its client is discarded', async () => {
    const timed = new pg.Pool({ connectionString: url, max: 2, query_timeout: 150 });
    timed.on('error', () => {});
    const tm = new TxManager(timed, { defaults: noBackoff });
    const pids: number[] = [];
    let calls = 0;
    const result = await tm.do(async (tx) => {
      calls++;
      pids.push((await tx.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p ?? 0);
      await tx.query('SELECT pg_sleep(3)');
      return 'done';
    });
    expect(calls).toBe(1);
    expect(result._unsafeUnwrapErr()).toMatchObject({ kind: 'QueryTimeout' });
    // The client that timed out was destroyed, not returned to the pool with its statement running.
    const next = await tm.doOrThrow(
      async (tx) => (await tx.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p,
    );
    expect(next).not.toBe(pids[0]);
    expect(timed.totalCount - timed.idleCount).toBe(0);
    await pool.query('SELECT pg_cancel_backend($1)', [pids[0]]);
    await timed.end();
  });
});

describe('idle_in_transaction_session_timeout (25P03)', () => {
  it('is not retried by default: the slow call inside the transaction would run again', async () => {
    const tm = new TxManager(pool, { defaults: noBackoff });
    let externalCalls = 0;
    const result = await tm.do(
      async (tx) => {
        const pid = (await tx.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p;
        // The slow external call: it lasts until the server has ended the idle session.
        externalCalls++;
        for (;;) {
          const { rows } = await pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid]);
          if (rows.length === 0) break;
        }
        await tx.query('INSERT INTO m VALUES (1)');
        return 'done';
      },
      { idleInTransactionTimeout: 100 },
    );
    expect(externalCalls).toBe(1);
    const error = result._unsafeUnwrapErr();
    expect(error).toMatchObject({ kind: 'IdleInTransactionTimeout', code: '25P03' });
    expect(error.message).toMatch(/idle/);
    expect(await count()).toBe(0);
  });
});

describe('transaction control through tx.query', () => {
  it('a COMMIT sent through tx.query is refused with a typed error; later statements do not run in autocommit', async () => {
    const tm = new TxManager(pool);
    const outcome = await tm
      .do(async (tx) => {
        await tx.query('INSERT INTO m VALUES (1)');
        await tx.query('COMMIT').catch(() => {});
        await tx.query('INSERT INTO m VALUES (2)').catch(() => {});
        return 'ok';
      })
      .then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    expect(outcome).toEqual({ error: expect.any(TxUsageError) });
    expect((outcome as { error: TxUsageError }).error.reason).toBe('transaction-control');
    const { rows } = await pool.query<{ id: number }>('SELECT id FROM m ORDER BY id');
    // The user's COMMIT committed row 1; row 2 never ran outside the transaction.
    expect(rows.map((r) => r.id)).toEqual([1]);
  });

  it('a ROLLBACK sent through tx.query is detected: do() does not report a commit', async () => {
    const tm = new TxManager(pool);
    const outcome = await tm
      .do(async (tx) => {
        await tx.query('INSERT INTO m VALUES (1)');
        await tx.query('ROLLBACK');
        return 'ok';
      })
      .then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    expect((outcome as { error: TxUsageError }).error).toBeInstanceOf(TxUsageError);
    expect(await count()).toBe(0);
  });

  it("a user's own savepoints are not mistaken for the end of the transaction", async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      await tx.query('INSERT INTO m VALUES (1)');
      await tx.query('SAVEPOINT mine');
      await tx.query('INSERT INTO m VALUES (2)');
      await tx.query('ROLLBACK TO SAVEPOINT mine');
      return 'ok';
    });
    expect(result._unsafeUnwrap()).toBe('ok');
    expect(await count()).toBe(1);
  });
});

describe('concurrent scopes on one transaction', () => {
  it('a required scope concurrent with a failing nested scope never loses its writes while do() returns Ok', async () => {
    const tm = new TxManager(pool);
    const inside = gate();
    const outcome = await tm
      .do(async () => {
        await Promise.all([
          tm.do(async (tx) => {
            await inside.at('savepoint'); // the nested scope's SAVEPOINT is open now
            await tx.query("INSERT INTO m VALUES (1, 'required')");
          }),
          tm.do(
            async (tx) => {
              await tx.query("INSERT INTO m VALUES (2, 'nested')");
              inside.open('savepoint');
              await new Promise((resolve) => setImmediate(resolve));
              return err(new ConditionFailed());
            },
            { propagation: 'nested' },
          ),
        ]);
        return 'ok';
      })
      .then(
        (value) => ({ value: value.isOk() ? value.value : value.error }),
        (error: unknown) => ({ error }),
      );
    const notes = (await pool.query<{ note: string }>('SELECT note FROM m ORDER BY id')).rows.map(
      (r) => r.note,
    );
    if ('value' in outcome && outcome.value === 'ok') {
      expect(notes).toEqual(['required']);
    } else {
      expect((outcome as { error: TxUsageError }).error).toBeInstanceOf(TxUsageError);
      expect((outcome as { error: TxUsageError }).error.reason).toBe('concurrent-scope');
      expect(notes).toEqual([]);
    }
  });

  it('never runs two queries at once on the one client of a transaction', async () => {
    let inFlight = 0;
    let most = 0;
    class Watching extends pg.Client {
      // biome-ignore lint/suspicious/noExplicitAny: observes pg's many query overloads.
      override query(...args: any[]): any {
        inFlight++;
        most = Math.max(most, inFlight);
        // biome-ignore lint/suspicious/noExplicitAny: forwards the exact arguments.
        const pending = (super.query as any)(...args) as Promise<unknown>;
        return pending.finally(() => {
          inFlight--;
        });
      }
    }
    const watched = new pg.Pool({ connectionString: url, max: 2, Client: Watching });
    watched.on('error', () => {});
    const tm = new TxManager(watched);
    const result = await tm.do(async (tx) => {
      await Promise.all([
        tx.query('SELECT pg_sleep(0.02)'),
        tx.query('INSERT INTO m VALUES (1)'),
        tx.query('INSERT INTO m VALUES (2)'),
      ]);
      return 'ok';
    });
    expect(result._unsafeUnwrap()).toBe('ok');
    expect(most).toBe(1);
    expect(await count()).toBe(2);
    await watched.end();
  });
});
