import { err, ok } from 'neverthrow';
import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConditionFailed, type UniqueViolation } from '../../src/errors/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean } from './tx-support.js';

const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query(`
    CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL CONSTRAINT users_email_key UNIQUE);
    CREATE TABLE rooms (room int NOT NULL, during tstzrange NOT NULL,
      CONSTRAINT rooms_no_overlap EXCLUDE USING gist (room WITH =, during WITH &&));
    CREATE TABLE items (id int PRIMARY KEY, n int NOT NULL);
  `);
});

afterEach(async () => {
  await expectClean(pool, url);
});

class EmailTaken extends Error {
  readonly kind = 'EmailTaken' as const;
  constructor(readonly columns: readonly string[]) {
    super('this email is already registered');
  }
}

describe("tx.query has pg's signatures", () => {
  it('tx.query(config, values) merges the values into the config, as pg does', async () => {
    const tm = new TxManager(pool);
    const config = { text: 'SELECT $1::int AS n, $2::text AS s', rowMode: 'array' as const };
    const direct = await pool.query(config, [7, 'x']);
    const inside = await tm.doOrThrow((tx) => tx.query(config, [7, 'x']));
    expect(inside.rows).toEqual(direct.rows);
    expect(inside.rows).toEqual([[7, 'x']]);
    // Values passed with the call win over the config's own, in pg and inside a transaction alike.
    const both = { text: 'SELECT $1::int AS n', values: [1] };
    const overridden = await tm.doOrThrow((tx) => tx.query<{ n: number }>(both, [2]));
    // tx.query leaves the caller's config as it was (pg 8.11's own query writes the values into it).
    expect(both.values).toEqual([1]);
    expect(overridden.rows).toEqual((await pool.query<{ n: number }>({ ...both }, [2])).rows);
    expect(overridden.rows).toEqual([{ n: 2 }]);
  });
});

describe('TxManager.do basics', () => {
  it('commits a plain value and exposes the attempt, isolation and BEGIN settings inside', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(
      async (tx) => {
        await tx.query('INSERT INTO items (id, n) VALUES (1, 10)');
        const settings = await tx.query<{ iso: string; lt: string; st: string; idle: string; ro: string }>(
          `SELECT current_setting('transaction_isolation') AS iso, current_setting('lock_timeout') AS lt,
                  current_setting('statement_timeout') AS st,
                  current_setting('idle_in_transaction_session_timeout') AS idle,
                  current_setting('transaction_read_only') AS ro`,
        );
        return { attempt: tx.attempt, depth: tx.depth, isolation: tx.isolation, settings: settings.rows[0] };
      },
      {
        isolation: 'repeatable read',
        lockTimeout: '1500ms',
        statementTimeout: '2s',
        idleInTransactionTimeout: '1m',
      },
    );
    expect(result._unsafeUnwrap()).toEqual({
      attempt: 1,
      depth: 0,
      isolation: 'repeatable read',
      settings: { iso: 'repeatable read', lt: '1500ms', st: '2s', idle: '1min', ro: 'off' },
    });
    const after = await pool.query<{ lt: string }>(`SELECT current_setting('lock_timeout') AS lt`);
    expect(after.rows[0]?.lt).toBe('0'); // SET LOCAL ended with the transaction
    expect((await pool.query('SELECT n FROM items WHERE id = 1')).rows).toEqual([{ n: 10 }]);
  });

  it("accepts pg's QueryConfig form and typed rows", async () => {
    const tm = new TxManager(pool);
    const rows = await tm.doOrThrow(
      async (tx) =>
        (await tx.query<{ two: number }>({ text: 'SELECT $1::int + 1 AS two', values: [1] })).rows,
    );
    expect(rows).toEqual([{ two: 2 }]);
  });

  it('runs a serializable read-only deferrable transaction', async () => {
    const tm = new TxManager(pool);
    const ro = await tm.doOrThrow(
      async (tx) => {
        const r = await tx.query<{ ro: string; d: string }>(
          `SELECT current_setting('transaction_read_only') AS ro, current_setting('transaction_deferrable') AS d`,
        );
        return r.rows[0];
      },
      { isolation: 'serializable', readOnly: true, deferrable: true },
    );
    expect(ro).toEqual({ ro: 'on', d: 'on' });
  });

  it('rolls back and returns the Err when the callback returns err()', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      await tx.query('INSERT INTO items (id, n) VALUES (2, 1)');
      return err(new ConditionFailed(0));
    });
    expect(result.isErr() && result.error.kind).toBe('ConditionFailed');
    expect((await pool.query('SELECT 1 FROM items WHERE id = 2')).rowCount).toBe(0);
  });

  it('accepts ok() and ResultAsync-style returns', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(async () => ok(42));
    expect(result._unsafeUnwrap()).toBe(42);
  });

  it('rolls back and rejects with a defect unchanged', async () => {
    const tm = new TxManager(pool);
    const bug = new TypeError('undefined is not a function');
    const rollbacks: unknown[] = [];
    const tm2 = new TxManager(pool, { hooks: { onRollback: (e) => rollbacks.push(e.error) } });
    await expect(
      tm.do(async (tx) => {
        await tx.query('INSERT INTO items (id, n) VALUES (3, 1)');
        throw bug;
      }),
    ).rejects.toBe(bug);
    await expect(tm2.doOrThrow(() => Promise.reject(bug))).rejects.toBe(bug);
    expect(rollbacks).toEqual([bug]);
    expect((await pool.query('SELECT 1 FROM items WHERE id = 3')).rowCount).toBe(0);
  });

  it('maps 23505 with constraint, table and columns, and does not retry it', async () => {
    const calls: number[] = [];
    const retries: unknown[] = [];
    const tm = new TxManager(pool, { hooks: { onRetry: (e) => retries.push(e) } });
    await pool.query(`INSERT INTO users (email) VALUES ('a@x.io')`);
    const result = await tm.do(async (tx) => {
      calls.push(tx.attempt);
      await tx.query('INSERT INTO users (email) VALUES ($1)', ['a@x.io']);
    });
    expect(result.isErr()).toBe(true);
    const error = result._unsafeUnwrapErr() as UniqueViolation;
    expect(error.kind).toBe('UniqueViolation');
    expect(error.constraint).toBe('users_email_key');
    expect(error.table).toBe('users');
    expect(error.columns).toEqual(['email']);
    expect(calls).toEqual([1]);
    expect(retries).toEqual([]);
  });

  it('maps 23P01 (exclusion) with the constraint name, not retried', async () => {
    const tm = new TxManager(pool);
    await pool.query(`INSERT INTO rooms VALUES (1, tstzrange('2030-01-01 10:00Z', '2030-01-01 12:00Z'))`);
    let calls = 0;
    const result = await tm.do(async (tx) => {
      calls++;
      await tx.query(`INSERT INTO rooms VALUES (1, tstzrange('2030-01-01 11:00Z', '2030-01-01 13:00Z'))`);
    });
    const error = result._unsafeUnwrapErr();
    expect(error.kind).toBe('ExclusionViolation');
    expect(error.kind === 'ExclusionViolation' && error.constraint).toBe('rooms_no_overlap');
    expect(calls).toBe(1);
  });

  it("maps a constraint to the service's own error through the constraints option", async () => {
    const tm = new TxManager(pool, {
      constraints: { users_email_key: (v) => new EmailTaken(v.columns) },
    });
    await pool.query(`INSERT INTO users (email) VALUES ('b@x.io')`);
    const result = await tm.do((tx) => tx.query('INSERT INTO users (email) VALUES ($1)', ['b@x.io']));
    const error = result._unsafeUnwrapErr();
    // The type of `error` includes EmailTaken: the map's builders flow into do()'s error type.
    expect(error).toBeInstanceOf(EmailTaken);
    expect(error.kind === 'EmailTaken' && error.columns).toEqual(['email']);
    await expect(
      tm.doOrThrow((tx) => tx.query(`INSERT INTO users (email) VALUES ('b@x.io')`)),
    ).rejects.toBeInstanceOf(EmailTaken);
  });

  it('returns the original failure (not 25P02) when a caught error left the transaction aborted', async () => {
    const tm = new TxManager(pool);
    await pool.query(`INSERT INTO users (email) VALUES ('c@x.io')`);
    const result = await tm.do(async (tx) => {
      await tx.query(`INSERT INTO users (email) VALUES ('c@x.io')`).catch(() => undefined);
      return 'swallowed';
    });
    expect(result._unsafeUnwrapErr().kind).toBe('UniqueViolation');
  });

  it('returns InvalidOptions and sends no SQL for invalid options', async () => {
    const { pool: counted, log } = countingPool(url);
    try {
      const tm = new TxManager(counted);
      const bad: unknown[] = [
        { isolation: 'snapshot' },
        { lockTimeout: -1 },
        { statementTimeout: Number.NaN },
        { deferrable: true },
        { deferrable: true, isolation: 'serializable' },
        { maxAttempts: 0 },
        { lockTimeout: '5 parsecs' },
        { lockTimeout: "1s'; DROP TABLE items; --" },
        { unknownKey: 1 },
        { backoff: { baseMs: 100, capMs: 10 } },
        'serializable',
      ];
      for (const options of bad) {
        const result = await tm.do(() => 1, options as never);
        expect(result.isErr() && result.error.kind).toBe('InvalidOptions');
        expect(
          result.isErr() && result.error.kind === 'InvalidOptions' && result.error.issues.length,
        ).toBeGreaterThan(0);
      }
      expect(log.texts).toEqual([]);
      expect(counted.totalCount).toBe(0);
      // and a valid call does send SQL (the counter works)
      await tm.doOrThrow((tx) => tx.query('SELECT 1'), { lockTimeout: 10 });
      expect(log.texts).toEqual([
        'BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = 10',
        'SELECT 1',
        'COMMIT',
      ]);
    } finally {
      await counted.end();
    }
  });

  it('rejects invalid manager options at construction', () => {
    expect(() => new TxManager(pool, { defaults: { isolation: 'chaos' as never } })).toThrow(
      /defaults\.isolation/,
    );
    expect(() => new TxManager(pool, { strict: 'yes' as never })).toThrow(/strict/);
  });

  it('merges per-call options over defaults', async () => {
    const tm = new TxManager(pool, { defaults: { isolation: 'repeatable read', lockTimeout: '3s' } });
    const seen = await tm.doOrThrow(
      async (tx) =>
        (
          await tx.query<{ iso: string; lt: string }>(
            `SELECT current_setting('transaction_isolation') AS iso, current_setting('lock_timeout') AS lt`,
          )
        ).rows[0],
      { lockTimeout: 250 },
    );
    expect(seen).toEqual({ iso: 'repeatable read', lt: '250ms' });
  });

  it('one options object passed again is read again: a changed value, a removed or added key, an invalid value', async () => {
    const tm = new TxManager(pool);
    const settings = (options: Record<string, unknown>) =>
      tm.do(
        async (tx) =>
          (
            await tx.query<{ iso: string; lt: string }>(
              `SELECT current_setting('transaction_isolation') AS iso, current_setting('lock_timeout') AS lt`,
            )
          ).rows[0],
        options,
      );
    const options: Record<string, unknown> = { isolation: 'repeatable read', lockTimeout: 250 };
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'repeatable read', lt: '250ms' });
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'repeatable read', lt: '250ms' });
    options.lockTimeout = 400;
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'repeatable read', lt: '400ms' });
    delete options.isolation;
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'read committed', lt: '400ms' });
    options.isolation = 'serializable';
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'serializable', lt: '400ms' });
    options.lockTimeout = -1;
    expect((await settings(options))._unsafeUnwrapErr()).toMatchObject({ kind: 'InvalidOptions' });
    options.lockTimeout = 250;
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'serializable', lt: '250ms' });
    // Another object with the same values (found by its content), then the first one again.
    expect((await settings({ lockTimeout: 250, isolation: 'serializable' }))._unsafeUnwrap()).toEqual({
      iso: 'serializable',
      lt: '250ms',
    });
    options.isolation = 'read committed';
    expect((await settings(options))._unsafeUnwrap()).toEqual({ iso: 'read committed', lt: '250ms' });
  });

  it('mandatory outside a transaction returns NotInTransaction without SQL', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(() => 1, { propagation: 'mandatory' });
    expect(result._unsafeUnwrapErr().kind).toBe('NotInTransaction');
    const inside = await tm.doOrThrow(() => tm.doOrThrow((tx) => tx.depth, { propagation: 'mandatory' }));
    expect(inside).toBe(0);
  });

  it('db() and current() give the transaction inside do() and the pool outside', async () => {
    const tm = new TxManager(pool);
    expect(tm.db()).toBe(pool);
    expect(tm.current()).toBeUndefined();
    const leaked = await tm.doOrThrow(async (tx) => {
      expect(tm.db()).toBe(tx);
      expect(tm.current()).toBe(tx);
      const pid1 = (await tx.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p;
      const pid2 = (await tm.db().query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p;
      expect(pid2).toBe(pid1);
      await new Promise((r) => setImmediate(r));
      expect(tm.current()).toBe(tx);
      return tx;
    });
    expect(tm.current()).toBeUndefined();
    // A Tx used after its transaction ended fails clearly instead of running outside it.
    await expect(leaked.query('SELECT 1')).rejects.toBeInstanceOf(TxUsageError);
  });

  it('strict mode: pool.query / pool.connect inside a transaction throw; outside they work', async () => {
    const strictPool = new pg.Pool({ connectionString: url, max: 3 });
    strictPool.on('error', () => {});
    try {
      const tm = new TxManager(strictPool, { strict: true });
      const result = tm.doOrThrow(
        async (tx) => {
          await tx.query('SELECT 1');
          await strictPool.query('SELECT 1');
        },
        { name: 'checkout' },
      );
      await expect(result).rejects.toBeInstanceOf(TxUsageError);
      await expect(result).rejects.toThrow(/transaction "checkout" is active/);
      await expect(tm.doOrThrow(() => strictPool.connect())).rejects.toMatchObject({
        reason: 'pool-in-transaction',
      });
      expect((await strictPool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      // requiresNew still gets its own client: the manager uses the unguarded connect.
      const nested = await tm.doOrThrow(() =>
        tm.doOrThrow(() => 'independent', { propagation: 'requiresNew' }),
      );
      expect(nested).toBe('independent');
      // a non-strict manager on another pool does not patch anything
      new TxManager(pool);
      expect(Object.hasOwn(pool, 'query')).toBe(false);
      expect(strictPool.totalCount - strictPool.idleCount).toBe(0);
    } finally {
      await strictPool.end();
    }
  });
});
