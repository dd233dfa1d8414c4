import { err } from 'neverthrow';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean } from './tx-support.js';

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

/** `.then(...settled)`: how a do() call ended, `{ value }` or `{ error }`, without throwing. */
const settled = [(value: unknown) => ({ value }), (error: unknown) => ({ error })] as const;

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
        .then(...settled);
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
  /** Runs `statement` after a write inside tm.do on a pool that records what it sends. */
  async function refused(statement: string): Promise<{ outcome: unknown; sent: string[]; rows: number[] }> {
    const { pool: logged, log } = countingPool(url, 2);
    const tm = new TxManager(logged);
    const outcome = await tm
      .do(async (tx) => {
        await tx.query('INSERT INTO m VALUES (1)');
        await tx.query(statement).catch(() => {});
        await tx.query('INSERT INTO m VALUES (2)').catch(() => {});
        return 'ok';
      })
      .then(...settled);
    await logged.end();
    // Checked from another connection: nothing the transaction wrote was committed.
    const rows = (await pool.query<{ id: number }>('SELECT id FROM m ORDER BY id')).rows.map((r) => r.id);
    return { outcome, sent: log.texts, rows };
  }

  const control = [
    'COMMIT',
    'commit work',
    'COMMIT AND CHAIN',
    'ROLLBACK',
    'ROLLBACK TRANSACTION AND NO CHAIN',
    'END',
    'ABORT',
    "PREPARE TRANSACTION 'x'",
    "COMMIT PREPARED 'x'",
    "ROLLBACK PREPARED 'x'",
    'BEGIN',
    'START TRANSACTION ISOLATION LEVEL SERIALIZABLE',
    "INSERT INTO m VALUES (3, 'a;b'); COMMIT",
    '/* first /* nested */ comment */ -- and a line comment\n  COMMIT',
    "SELECT $$; COMMIT $$; SELECT E'\\'; commit'; COMMIT",
    'SELECT 1 AS "x;"; End',
  ];
  it.each(control)(
    '%j is refused before it is sent; nothing the transaction wrote is committed',
    async (statement) => {
      const { outcome, sent, rows } = await refused(statement);
      expect(outcome).toEqual({ error: expect.any(TxUsageError) });
      expect((outcome as { error: TxUsageError }).error.reason).toBe('transaction-control');
      // The last statement is the manager's own ROLLBACK; the refused one never reached the server.
      expect(sent.slice(0, -1)).not.toContain(statement);
      expect(sent.filter((t) => t.startsWith('INSERT'))).toEqual(['INSERT INTO m VALUES (1)']);
      expect(sent.at(-1)).toBe('ROLLBACK');
      expect(rows).toEqual([]);
    },
  );

  const notControl = [
    "SELECT 'commit; rollback'",
    'SELECT $tag$ COMMIT; $$ END $$ $tag$',
    "SELECT E'it\\'s; COMMIT'",
    'SELECT 1 AS "commit"',
    '-- COMMIT\nSELECT 1',
    '/* COMMIT; /* ROLLBACK */ END; */ SELECT 1',
    'DO $$ BEGIN PERFORM 1; END $$',
    'PREPARE p AS SELECT 1',
    'SELECT 1; SELECT 2',
  ];
  it.each(notControl)('%j is not mistaken for transaction control', async (statement) => {
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      await tx.query('INSERT INTO m VALUES (1)');
      await tx.query(statement);
      return 'ok';
    });
    expect(result._unsafeUnwrap()).toBe('ok');
    expect(await count()).toBe(1);
  });

  it('a COMMIT in a config object is refused too; the callback catching it does not make do() commit', async () => {
    const { pool: logged, log } = countingPool(url, 2);
    const tm = new TxManager(logged);
    let caught: unknown;
    const outcome = await tm
      .do(async (tx) => {
        await tx.query('INSERT INTO m VALUES (1)');
        await tx.query({ text: 'COMMIT' }).catch((error: unknown) => {
          caught = error;
        });
        return 'ok';
      })
      .then(...settled);
    await logged.end();
    expect(caught).toBeInstanceOf(TxUsageError);
    expect(outcome).toEqual({ error: caught });
    expect(log.texts).not.toContain('COMMIT');
    expect(await count()).toBe(0);
  });

  it('a COMMIT in a submittable (a stream keeps its SQL on .cursor.text) is refused before it is submitted', async () => {
    const tm = new TxManager(pool);
    let submitted = 0;
    // The shape of pg-query-stream's QueryStream: its SQL on .cursor.text, its own submit().
    const stream = { cursor: { text: 'COMMIT' }, submit: () => void submitted++ };
    const unreadable = { submit: () => void submitted++ };
    const outcomes: unknown[] = [];
    const outcome = await tm
      .do(async (tx) => {
        await tx.query('INSERT INTO m VALUES (1)');
        for (const q of [stream, unreadable]) {
          await tx.query(q as unknown as pg.QueryConfig).catch((error: unknown) => outcomes.push(error));
        }
        await tx.query('INSERT INTO m VALUES (2)').catch(() => {});
        return 'ok';
      })
      .then(...settled);
    expect(submitted).toBe(0);
    expect(outcomes).toHaveLength(2);
    for (const e of outcomes) expect((e as TxUsageError).reason).toBe('transaction-control');
    expect(outcome).toEqual({ error: outcomes[0] });
    expect(await count()).toBe(0);
  });

  it("a user's own savepoints are not mistaken for the end of the transaction", async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      await tx.query('INSERT INTO m VALUES (1)');
      await tx.query('SAVEPOINT mine');
      await tx.query('INSERT INTO m VALUES (2)');
      await tx.query('ROLLBACK TO SAVEPOINT mine');
      await tx.query('ROLLBACK WORK TO mine; RELEASE mine');
      return 'ok';
    });
    expect(result._unsafeUnwrap()).toBe('ok');
    expect(await count()).toBe(1);
  });

  it("a savepoint statement naming the manager's own savepoints is refused before it is sent", async () => {
    const tm = new TxManager(pool);
    const outcome = await tm
      .do(async () => {
        await tm.do(
          async (tx) => {
            await tx.query('INSERT INTO m VALUES (1)');
            await tx.query('RELEASE SAVEPOINT pg_txkit_sp_1');
          },
          { propagation: 'nested' },
        );
        return 'ok';
      })
      .then(...settled);
    expect((outcome as { error: TxUsageError }).error.reason).toBe('transaction-control');
    expect(await count()).toBe(0);
  });

  it("inside a nested scope, RELEASE / ROLLBACK TO of a savepoint opened outside it is refused (it would end the scope's savepoint)", async () => {
    const tm = new TxManager(pool);
    const outcome = await tm
      .do(async (tx) => {
        await tx.query('SAVEPOINT outer_one');
        await tm.do(
          async (inner) => {
            await inner.query('SAVEPOINT inner_one');
            await inner.query('INSERT INTO m VALUES (1)');
            await inner.query('ROLLBACK TO SAVEPOINT inner_one'); // its own: fine
            await inner.query('ROLLBACK TO SAVEPOINT outer_one');
          },
          { propagation: 'nested' },
        );
        return 'ok';
      })
      .then(...settled);
    expect((outcome as { error: TxUsageError }).error.reason).toBe('transaction-control');
    expect(await count()).toBe(0);
  });
});

describe('an error a query builder wraps or replaces', () => {
  /** What a builder does with pg's error: drizzle keeps it as `cause`, possibly wrapped again. */
  class BuilderQueryError extends Error {
    constructor(message: string, options: { cause: unknown }) {
      super(message, options);
    }
  }

  it('a 40001 wrapped (twice) by a builder is classified and retried', async () => {
    const tm = new TxManager(pool, { defaults: noBackoff });
    let calls = 0;
    const result = await tm.do(async (tx) => {
      calls++;
      if (calls === 1) {
        try {
          await tx.query("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$");
        } catch (error) {
          throw new BuilderQueryError('outer', {
            cause: new BuilderQueryError('Failed query', { cause: error }),
          });
        }
      }
      await tx.query('INSERT INTO m VALUES ($1)', [calls]);
      return calls;
    });
    expect(result._unsafeUnwrap()).toBe(2);
    expect(await count()).toBe(1);
  });

  it('a wrapped unique violation comes back as UniqueViolation', async () => {
    await pool.query('INSERT INTO m VALUES (1)');
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      try {
        await tx.query('INSERT INTO m VALUES (1)');
      } catch (error) {
        throw new BuilderQueryError('Failed query: insert into m', { cause: error });
      }
    });
    expect(result._unsafeUnwrapErr()).toMatchObject({ kind: 'UniqueViolation', constraint: 'm_pkey' });
  });

  it("a wrapper around ANOTHER connection's database error is not this transaction's: it rejects unchanged", async () => {
    const elsewhere = await pool
      .query("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")
      .catch((error: unknown) => error);
    const tm = new TxManager(pool, { defaults: noBackoff });
    const thrown = new BuilderQueryError('Failed query', { cause: elsewhere });
    let calls = 0;
    const outcome = await tm
      .do(async (tx) => {
        calls++;
        await tx.query('INSERT INTO m VALUES (1)');
        throw thrown;
      })
      .then(...settled);
    expect(calls).toBe(1);
    expect((outcome as { error: unknown }).error).toBe(thrown);
    expect(await count()).toBe(0);
  });

  it('a cycle in the cause chain ends the search (rejects unchanged)', async () => {
    const tm = new TxManager(pool);
    const a = new Error('a') as Error & { cause?: unknown };
    const b = new Error('b', { cause: a });
    a.cause = b;
    const outcome = await tm
      .do(async () => {
        throw a;
      })
      .then(...settled);
    expect((outcome as { error: unknown }).error).toBe(a);
  });

  it("an error that REPLACES pg's (no cause) after the transaction aborted is decided from the recorded driver error: retried", async () => {
    const tm = new TxManager(pool, { defaults: noBackoff });
    let calls = 0;
    const result = await tm.do(async (tx) => {
      calls++;
      if (calls === 1) {
        await tx.query("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$").catch(() => {
          // What Prisma does: pg's error becomes its own (P2034), without a cause.
          throw Object.assign(new Error('Transaction failed due to a write conflict'), { code: 'P2034' });
        });
      }
      await tx.query('INSERT INTO m VALUES ($1)', [calls]);
      return calls;
    });
    expect(result._unsafeUnwrap()).toBe(2);
  });

  it('a replaced unique violation comes back through the constraints map', async () => {
    await pool.query('INSERT INTO m VALUES (1)');
    class Taken extends Error {}
    const tm = new TxManager(pool, { constraints: { m_pkey: () => new Taken('taken') } });
    const result = await tm.do(async (tx) => {
      await tx.query('INSERT INTO m VALUES (1)').catch(() => {
        throw Object.assign(new Error('Unique constraint failed on the fields: (`id`)'), { code: 'P2002' });
      });
    });
    expect(result._unsafeUnwrapErr()).toBeInstanceOf(Taken);
  });

  it('a non-database error thrown while the transaction is healthy runs once and rejects unchanged, even after a handled query error', async () => {
    const tm = new TxManager(pool, { defaults: noBackoff });
    const thrown = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    let calls = 0;
    const outcome = await tm
      .do(async (tx) => {
        calls++;
        await tx.query('SAVEPOINT before_insert');
        await tx.query('INSERT INTO m VALUES (1)');
        await tx
          .query('INSERT INTO m VALUES (1)')
          .catch(() => tx.query('ROLLBACK TO SAVEPOINT before_insert'));
        throw thrown;
      })
      .then(...settled);
    expect(calls).toBe(1);
    expect((outcome as { error: unknown }).error).toBe(thrown);
    expect(await count()).toBe(0);
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
