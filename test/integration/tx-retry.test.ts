import { err, ok } from 'neverthrow';
import type pg from 'pg';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  ConditionFailed,
  DeadlockDetected,
  LockNotAvailable,
  type RetriesExhausted,
  SerializationFailure,
} from '../../src/errors/index.js';
import { gate } from '../../src/testing/gate.js';
import type { RetryEvent, RollbackEvent } from '../../src/tx/hooks.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { expectClean } from './tx-support.js';

const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query(`
    CREATE TABLE doctors (id int PRIMARY KEY, on_call boolean NOT NULL);
    CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL);
    CREATE TABLE claims (k int, CONSTRAINT claims_k_key UNIQUE (k) DEFERRABLE INITIALLY DEFERRED);
  `);
});

beforeEach(async () => {
  await pool.query(`
    TRUNCATE doctors, acct, claims;
    INSERT INTO doctors VALUES (1, true), (2, true);
    INSERT INTO acct VALUES (1, 100), (2, 100);
  `);
});

afterEach(async () => {
  await expectClean(pool, url);
});

/** Raises a real server error with the given SQLSTATE inside the transaction. */
function raise(db: { query: (text: string) => Promise<unknown> }, code: string): Promise<unknown> {
  if (!/^[0-9A-Z]{5}$/.test(code)) throw new TypeError('bad code');
  return db.query(`DO $$ BEGIN RAISE EXCEPTION 'forced' USING ERRCODE = '${code}'; END $$`);
}

describe('retries', () => {
  it('write skew at serializable: one of two "leave the shift" calls is retried, both succeed, one doctor stays', async () => {
    const retries: RetryEvent[] = [];
    const tm = new TxManager(pool, { hooks: { onRetry: (e) => retries.push(e) } });
    const g = gate();
    const leave = (id: number) =>
      tm.do(
        async (tx) => {
          const { rows } = await tx.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM doctors WHERE on_call',
          );
          if (tx.attempt === 1) await g.at('read'); // both have read "2 on call" before either writes
          if ((rows[0]?.n ?? 0) < 2) return ok(false);
          await tx.query('UPDATE doctors SET on_call = false WHERE id = $1', [id]);
          return ok(true);
        },
        { isolation: 'serializable', name: `leave-${id}` },
      );
    const both = Promise.all([leave(1), leave(2)]);
    await g.reached('read', 2);
    g.open('read');
    const [a, b] = await both;
    expect([a._unsafeUnwrap(), b._unsafeUnwrap()].sort()).toEqual([false, true]);
    const onCall = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM doctors WHERE on_call');
    expect(onCall.rows[0]?.n).toBe(1);
    expect(retries.length).toBeGreaterThanOrEqual(1);
    expect(retries[0]?.error.kind).toBe('SerializationFailure');
    expect(retries[0]?.attempt).toBe(1);
  });

  it('naive control: the same interleaving at repeatable read without retries leaves nobody on call', async () => {
    const tm = new TxManager(pool);
    const g = gate();
    const leave = (id: number) =>
      tm.doOrThrow(
        async (tx) => {
          const { rows } = await tx.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM doctors WHERE on_call',
          );
          await g.at('read');
          if ((rows[0]?.n ?? 0) < 2) return false;
          await tx.query('UPDATE doctors SET on_call = false WHERE id = $1', [id]);
          return true;
        },
        { isolation: 'repeatable read', maxAttempts: 1 },
      );
    const both = Promise.all([leave(1), leave(2)]);
    await g.reached('read', 2);
    g.open('read');
    expect(await both).toEqual([true, true]);
    const onCall = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM doctors WHERE on_call');
    expect(onCall.rows[0]?.n).toBe(0); // the anomaly the serializable test prevents
  });

  it('retries the victim of a real deadlock (40P01); both transfers succeed', async () => {
    const retries: RetryEvent[] = [];
    const tm = new TxManager(pool, { hooks: { onRetry: (e) => retries.push(e) } });
    const g = gate();
    const transfer = (from: number, to: number) =>
      tm.do(async (tx) => {
        // deadlock_timeout is superuser-settable; short so the test does not wait the default 1 s.
        await tx.query(`SET LOCAL deadlock_timeout = '50ms'`);
        await tx.query('UPDATE acct SET n = n - 10 WHERE id = $1', [from]);
        if (tx.attempt === 1) await g.at('first-row-locked');
        await tx.query('UPDATE acct SET n = n + 10 WHERE id = $1', [to]); // opposite order: a cycle
        return ok(tx.attempt);
      });
    const both = Promise.all([transfer(1, 2), transfer(2, 1)]);
    await g.reached('first-row-locked', 2);
    g.open('first-row-locked');
    const [a, b] = await both;
    expect([a._unsafeUnwrap(), b._unsafeUnwrap()].sort()).toEqual([1, 2]);
    expect(retries.map((r) => r.error.kind)).toEqual(['DeadlockDetected']);
    const { rows } = await pool.query<{ id: number; n: number }>('SELECT id, n FROM acct ORDER BY id');
    expect(rows).toEqual([
      { id: 1, n: 100 },
      { id: 2, n: 100 },
    ]);
  });

  it('retries 55P03 from lockTimeout, and does not when retryOn excludes it', async () => {
    const blocker: pg.PoolClient = await pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('UPDATE acct SET n = n WHERE id = 1'); // holds the row lock
      let released: Promise<unknown> = Promise.resolve();
      const kinds: string[] = [];
      const tm = new TxManager(pool, {
        hooks: {
          onRetry: (e) => {
            kinds.push(e.error.kind);
            if (e.attempt === 1) released = blocker.query('COMMIT');
          },
        },
      });
      const result = await tm.do(
        async (tx) => {
          if (tx.attempt === 2) await released; // the blocker is gone before the second attempt
          await tx.query('UPDATE acct SET n = n + 1 WHERE id = 1');
          return tx.attempt;
        },
        { lockTimeout: 50 },
      );
      expect(result._unsafeUnwrap()).toBe(2);
      expect(kinds).toEqual(['LockNotAvailable']);

      await blocker.query('BEGIN');
      await blocker.query('UPDATE acct SET n = n WHERE id = 1');
      let calls = 0;
      const excluded = await new TxManager(pool).do(
        async (tx) => {
          calls++;
          await tx.query('UPDATE acct SET n = n + 1 WHERE id = 1');
        },
        { lockTimeout: '20ms', retryOn: ['SerializationFailure'] },
      );
      expect(excluded._unsafeUnwrapErr().kind).toBe('LockNotAvailable');
      expect(calls).toBe(1);
      await blocker.query('ROLLBACK');
    } finally {
      blocker.release();
    }
  });

  it('retries a 40001 raised by COMMIT itself (SSI: the other side of a write skew committed first)', async () => {
    const rollbacks: RollbackEvent[] = [];
    const tm = new TxManager(pool, { hooks: { onRollback: (e) => rollbacks.push(e) } });
    const g = gate();
    const other = await pool.connect();
    try {
      await other.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
      await other.query('SELECT count(*) FROM doctors WHERE on_call'); // reads both rows
      const result = tm.do(
        async (tx) => {
          const { rows } = await tx.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM doctors WHERE on_call',
          );
          if ((rows[0]?.n ?? 0) < 2) return 'stays';
          await tx.query('UPDATE doctors SET on_call = false WHERE id = 2');
          if (tx.attempt === 1) await g.at('before-commit'); // the write is done; COMMIT comes next
          return 'left';
        },
        { isolation: 'serializable', backoff: { baseMs: 0, capMs: 0 } },
      );
      await g.reached('before-commit');
      await other.query('UPDATE doctors SET on_call = false WHERE id = 1');
      await other.query('COMMIT'); // first committer wins; our transaction is now doomed by SSI
      g.open('before-commit');
      expect((await result)._unsafeUnwrap()).toBe('stays');
    } finally {
      other.release();
    }
    expect(rollbacks).toHaveLength(1);
    const failure = rollbacks[0]?.error as Error & { kind?: string };
    expect(failure.kind).toBe('SerializationFailure');
    expect((failure.cause as { code?: string }).code).toBe('40001');
    expect((failure.cause as { detail?: string }).detail).toMatch(/commit attempt/);
    const onCall = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM doctors WHERE on_call');
    expect(onCall.rows[0]?.n).toBe(1);
  });

  it('statementTimeout cancels a slow statement: StatementTimeout, not retried', async () => {
    const tm = new TxManager(pool);
    let calls = 0;
    const result = await tm.do(
      async (tx) => {
        calls++;
        await tx.query('SELECT pg_sleep(5)');
      },
      { statementTimeout: 20 },
    );
    const error = result._unsafeUnwrapErr();
    expect(error.kind).toBe('StatementTimeout');
    expect(error.kind === 'StatementTimeout' && error.reason).toBe('timeout');
    expect(calls).toBe(1);
  });

  it('idleInTransactionTimeout: with retryOn opting in, the attempt the server ended is retried on a new connection', async () => {
    const kinds: string[] = [];
    const tm = new TxManager(pool, { hooks: { onRetry: (e) => kinds.push(e.error.kind) } });
    const g = gate();
    let firstPid = 0;
    const result = tm.do(
      async (tx) => {
        const pid = (await tx.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p ?? 0;
        if (tx.attempt === 1) {
          firstPid = pid;
          await g.at('idle'); // idle in transaction until the server gives up on us
        }
        await tx.query('UPDATE acct SET n = n + 1 WHERE id = 2');
        return tx.attempt;
      },
      {
        idleInTransactionTimeout: 50,
        backoff: { baseMs: 0, capMs: 0 },
        retryOn: [
          'SerializationFailure',
          'DeadlockDetected',
          'LockNotAvailable',
          'ConnectionLost',
          'IdleInTransactionTimeout',
        ],
      },
    );
    await g.reached('idle');
    // Wait (bounded, by polling the server, not by sleeping) until the server ended that session.
    for (let i = 0; i < 500; i++) {
      const alive = await pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [firstPid]);
      if (alive.rowCount === 0) break;
    }
    g.open('idle');
    // Usually 2 attempts; on a loaded machine attempt 2 may also sit idle > 50 ms between its two
    // statements and be ended too — every failed attempt is an IdleInTransactionTimeout, one commits.
    const attempts = (await result)._unsafeUnwrap();
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect(kinds).toEqual(Array(attempts - 1).fill('IdleInTransactionTimeout'));
    expect((await pool.query('SELECT n FROM acct WHERE id = 2')).rows[0]).toEqual({ n: 101 });
  });

  it('afterCommit runs once after 3 attempts; afterRollback once per rolled-back attempt', async () => {
    const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 1, capMs: 5 } } });
    const committed: number[] = [];
    const rolledBack: number[] = [];
    const result = await tm.do(async (tx) => {
      tx.afterCommit(() => {
        committed.push(tx.attempt);
      });
      tx.afterRollback(() => {
        rolledBack.push(tx.attempt);
      });
      await tx.query('UPDATE acct SET n = n + 1 WHERE id = 1');
      if (tx.attempt < 3) await raise(tx, '40001');
      return tx.attempt;
    });
    expect(result._unsafeUnwrap()).toBe(3);
    expect(committed).toEqual([3]);
    expect(rolledBack).toEqual([1, 2]);
    expect((await pool.query('SELECT n FROM acct WHERE id = 1')).rows[0]).toEqual({ n: 101 });
  });

  it('never runs afterCommit after a rollback (Err, defect, non-retryable failure)', async () => {
    const tm = new TxManager(pool);
    const committed: string[] = [];
    const r1 = await tm.do(async (tx) => {
      tx.afterCommit(() => {
        committed.push('err');
      });
      return err(new ConditionFailed());
    });
    expect(r1.isErr()).toBe(true);
    await expect(
      tm.do(async (tx) => {
        tx.afterCommit(() => {
          committed.push('defect');
        });
        throw new RangeError('bug');
      }),
    ).rejects.toBeInstanceOf(RangeError);
    const r3 = await tm.do(async (tx) => {
      tx.afterCommit(() => {
        committed.push('failure');
      });
      await raise(tx, '23505');
    });
    expect(r3._unsafeUnwrapErr().kind).toBe('UniqueViolation');
    expect(committed).toEqual([]);
  });

  it('an afterCommit that throws goes to onCallbackError and the call still succeeds', async () => {
    const reported: unknown[] = [];
    const tm = new TxManager(pool, { hooks: { onCallbackError: (e) => reported.push([e.source, e.error]) } });
    const boom = new Error('webhook down');
    const result = await tm.do((tx) => {
      tx.afterCommit(() => {
        throw boom;
      });
      return 'done';
    });
    expect(result._unsafeUnwrap()).toBe('done');
    expect(reported).toEqual([['afterCommit', boom]]);
  });

  it('a RETURNED Err(SerializationFailure | DeadlockDetected) is retried like a thrown one; a returned LockNotAvailable is a value', async () => {
    const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 1, capMs: 2 } } });
    const attempts: number[] = [];
    const retried = await tm.do(async (tx) => {
      attempts.push(tx.attempt);
      if (tx.attempt === 1) return err(new SerializationFailure());
      if (tx.attempt === 2) return err(new DeadlockDetected());
      await tx.query('UPDATE acct SET n = n + 1 WHERE id = 1');
      return ok('done');
    });
    expect(retried._unsafeUnwrap()).toBe('done');
    expect(attempts).toEqual([1, 2, 3]);
    const refused = await tm.do(async () => err(new LockNotAvailable()));
    expect(refused._unsafeUnwrapErr().kind).toBe('LockNotAvailable');
    const exhausted = await tm.do(async () => err(new SerializationFailure()), { maxAttempts: 2 });
    expect(exhausted._unsafeUnwrapErr().kind).toBe('RetriesExhausted');
  });

  it('gives RetriesExhausted with the history of codes and delays', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do((tx) => raise(tx, '40P01'), {
      maxAttempts: 3,
      backoff: { baseMs: 2, capMs: 4 },
    });
    const error = result._unsafeUnwrapErr() as RetriesExhausted;
    expect(error.kind).toBe('RetriesExhausted');
    expect(error.attempts).toBe(3);
    expect(error.last.kind).toBe('DeadlockDetected');
    expect(error.history.map((h) => [h.attempt, h.kind, h.code])).toEqual([
      [1, 'DeadlockDetected', '40P01'],
      [2, 'DeadlockDetected', '40P01'],
      [3, 'DeadlockDetected', '40P01'],
    ]);
    expect(error.history[0]?.delayMs).toBeLessThanOrEqual(2);
    expect(error.history[1]?.delayMs).toBeLessThanOrEqual(4);
    expect(error.history[2]?.delayMs).toBe(0);
  });

  it('stops retrying at the deadline', async () => {
    const tm = new TxManager(pool);
    let calls = 0;
    const result = await tm.do(
      (tx) => {
        calls++;
        return raise(tx, '40001');
      },
      // every wait is 1 s (base = cap = 1 s, but jitter may pick less): a 1 ms deadline allows no retry.
      { deadline: 1, backoff: { baseMs: '1s', capMs: '1s' }, maxAttempts: 10 },
    );
    const error = result._unsafeUnwrapErr() as RetriesExhausted;
    expect(error.kind).toBe('RetriesExhausted');
    expect(error.message).toMatch(/deadline/);
    expect(calls).toBe(1);
  });

  it('an abort signal stops the retries; an already-aborted signal rejects before any SQL', async () => {
    const controller = new AbortController();
    const tm = new TxManager(pool, {
      hooks: { onRetry: () => controller.abort(new Error('client went away')) },
    });
    const result = await tm.do((tx) => raise(tx, '40001'), {
      signal: controller.signal,
      backoff: { baseMs: '10s', capMs: '10s' },
    });
    const error = result._unsafeUnwrapErr() as RetriesExhausted;
    expect(error.attempts).toBe(1);
    expect(error.message).toMatch(/aborted/);
    await expect(tm.do(() => 1, { signal: controller.signal })).rejects.toThrow('client went away');
  });

  it('reports commits, rollbacks and slow transactions to hooks', async () => {
    const events: string[] = [];
    const tm = new TxManager(pool, {
      slowTransactionMs: 0,
      hooks: {
        onCommit: (e) => events.push(`commit ${e.name} #${e.attempt} ${e.durationMs >= 0}`),
        onRollback: (e) =>
          events.push(`rollback ${e.name} #${e.attempt} ${(e.error as { kind?: string }).kind}`),
        onSlowTransaction: (e) => events.push(`slow ${e.name}`),
        onRetry: () => {
          throw new Error('a broken hook');
        },
        onCallbackError: (e) => events.push(`hook error in ${e.source}`),
      },
    });
    await tm.do((tx) => (tx.attempt === 1 ? raise(tx, '40001') : 1), {
      name: 'h',
      backoff: { baseMs: 0, capMs: 0 },
    });
    expect(events).toEqual([
      'rollback h #1 SerializationFailure',
      'slow h',
      'hook error in onRetry',
      'commit h #2 true',
      'slow h',
    ]);
  });
});
