import { err } from 'neverthrow';
import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { ConditionFailed, type RetriesExhausted, type UniqueViolation } from '../../src/errors/index.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { lockRows } from '../../src/patterns/lock-rows.js';
import { updateWhere } from '../../src/patterns/update-where.js';
import { Queue } from '../../src/queue/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { TxManagerOptions } from '../../src/tx/tx-manager-options.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import {
  type BuilderInstance,
  type BuilderUnderTest,
  type JoinPropagation,
  SCENARIO_SCHEMA,
} from '../fixtures/query-builders/builder-under-test.js';
import { drizzleBuilder } from '../fixtures/query-builders/drizzle-builder.js';
import { knexBuilder } from '../fixtures/query-builders/knex-builder.js';
import { kyselyBuilder } from '../fixtures/query-builders/kysely-builder.js';
import { prismaBuilder } from '../fixtures/query-builders/prisma-builder.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean, type SentLog } from './tx-support.js';

// Every integration gives the same guarantees; each row of this table is one builder, used as its
// users use it (its own query API, the ONE setup line of docs/query-builders.md).
const BUILDERS: readonly BuilderUnderTest[] = [kyselyBuilder, drizzleBuilder, prismaBuilder, knexBuilder];

const { pool: admin, url } = await useTestDatabase();
const noBackoff = { backoff: { baseMs: 0, capMs: 0 } } as const;

beforeAll(async () => {
  await admin.query(SCENARIO_SCHEMA);
});

/** The `kind` of an error (the manager's errors and the service's own both carry one). */
const kindOf = (error: unknown): string | undefined => (error as { kind?: string }).kind;

/** A user's error for the `constraints` map. */
class EmailTaken extends Error {
  readonly kind = 'EmailTaken' as const;
}

describe.each(BUILDERS)('$name through pg-txkit', (builder) => {
  /** The manager's pool records what its clients send (the builder has no pool of its own). */
  let pool: pg.Pool;
  let log: SentLog;
  const made: BuilderInstance[] = [];
  const managers: pg.Pool[] = [];

  beforeAll(() => {
    ({ pool, log } = countingPool(url, 6));
    managers.push(pool);
  });
  afterAll(async () => {
    await expectClean(pool, url);
    for (const b of made) await b.destroy();
    for (const p of managers) await p.end();
  });

  beforeEach(async () => {
    await admin.query(`TRUNCATE doctors, accounts, users RESTART IDENTITY;
      INSERT INTO doctors VALUES (1, 'alice', true), (1, 'bob', true);
      INSERT INTO accounts VALUES (1, 100), (2, 100)`);
    log.texts.length = 0;
  });

  async function setup(
    options: TxManagerOptions<Record<string, unknown>> = {},
    propagation?: JoinPropagation,
  ): Promise<{ tm: TxManager<Record<string, unknown>>; db: BuilderInstance }> {
    const tm = new TxManager<Record<string, unknown>>(pool, options);
    const db = await builder.create(tm, propagation);
    made.push(db);
    return { tm, db };
  }

  const balance = async (id: number): Promise<number> =>
    (await admin.query<{ balance: number }>('SELECT balance FROM accounts WHERE id = $1', [id])).rows[0]
      ?.balance ?? Number.NaN;
  /** Statements that start or end a transaction, as the server received them from the manager's pool. */
  const transactionControl = (): string[] =>
    log.texts.filter(
      (t) => /^\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT)\b/i.test(t) && !/^\s*ROLLBACK TO/i.test(t),
    );

  it('outside tm.do a query runs on the pool (autocommit); inside, on the transaction’s pinned client, also from a repository function', async () => {
    const { tm, db } = await setup();
    await db.addToBalance(1, 5);
    expect(await balance(1)).toBe(105); // committed on its own: autocommit on the pool
    expect(transactionControl()).toEqual([]);
    // `db` is all a repository module imports; the manager's async context carries the transaction.
    const repository = { credit: (id: number) => db.addToBalance(id, 1), whoRuns: () => db.backendPid() };
    const seen = await tm.doOrThrow(async (tx) => {
      const server = await tx.query<{ pid: number; id: string }>(
        'SELECT pg_backend_pid() AS pid, txid_current()::text AS id',
      );
      await repository.credit(1);
      const inside = await balance(1); // from another connection: not visible before COMMIT
      return { server: server.rows[0], pid: await repository.whoRuns(), txid: await db.txid(), inside };
    });
    expect(seen.pid).toBe(seen.server?.pid);
    expect(seen.txid).toBe(seen.server?.id);
    expect(seen.inside).toBe(105);
    expect(await balance(1)).toBe(106);
    expect(transactionControl()).toEqual([expect.stringMatching(/^BEGIN/), 'COMMIT']);
  });

  it('write skew under serializable: one of two concurrent "leave the shift" calls is refused after a 40001 retry', async () => {
    let retries = 0;
    const { tm, db } = await setup({ defaults: noBackoff, hooks: { onRetry: () => void retries++ } });
    const g = gate();
    const leave = (name: string) =>
      tm.do(
        async (tx) => {
          const onCall = await db.onCallCount(1);
          if (tx.attempt === 1) await g.at('read'); // both read before either writes
          if (onCall < 2) return err(new ConditionFailed(0));
          await db.goOffCall(1, name);
          return name;
        },
        { isolation: 'serializable' },
      );
    const both = [leave('alice'), leave('bob')];
    await g.reached('read', 2);
    g.open('read');
    const results = await Promise.all(both);
    expect(results.filter((r) => r.isOk())).toHaveLength(1);
    expect(results.filter((r) => r.isErr()).map((r) => kindOf(r._unsafeUnwrapErr()))).toEqual([
      'ConditionFailed',
    ]);
    expect(retries).toBeGreaterThanOrEqual(1);
    const onCall = await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM doctors WHERE on_call');
    expect(onCall.rows[0]?.n).toBe(1);
  });

  it('a 40001 raised by COMMIT is retried (the whole callback re-runs)', async () => {
    const { tm, db } = await setup({ defaults: noBackoff });
    const g = gate();
    const other = await admin.connect();
    try {
      await other.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
      await other.query('SELECT count(*) FROM doctors WHERE on_call');
      const result = tm.do(
        async (tx) => {
          if ((await db.onCallCount(1)) < 2) return 'stays';
          await db.goOffCall(1, 'bob');
          if (tx.attempt === 1) await g.at('before-commit');
          return 'left';
        },
        { isolation: 'serializable' },
      );
      await g.reached('before-commit');
      await other.query("UPDATE doctors SET on_call = false WHERE name = 'alice'");
      await other.query('COMMIT');
      g.open('before-commit');
      expect((await result)._unsafeUnwrap()).toBe('stays');
    } finally {
      other.release();
    }
    const commits = log.texts.filter((t) => t === 'COMMIT');
    expect(commits).toHaveLength(2); // the first COMMIT failed with 40001, the retry committed
  });

  it('a deadlock (40P01) is retried: both transfers commit', async () => {
    const retried: (string | undefined)[] = [];
    const { tm, db } = await setup({
      defaults: noBackoff,
      hooks: { onRetry: (e) => void retried.push(kindOf(e.error)) },
    });
    const g = gate();
    const transfer = (from: number, to: number) =>
      tm.do(async (tx) => {
        await db.addToBalance(from, -10);
        if (tx.attempt === 1) await g.at('first-row');
        await db.addToBalance(to, 10);
        return tx.attempt;
      });
    const both = [transfer(1, 2), transfer(2, 1)];
    await g.reached('first-row', 2);
    g.open('first-row');
    const attempts = (await Promise.all(both)).map((r) => r._unsafeUnwrap());
    // One committed at its first attempt; the deadlock's victim re-ran the whole callback.
    expect(Math.min(...attempts)).toBe(1);
    expect(Math.max(...attempts)).toBeGreaterThanOrEqual(2);
    expect(retried[0]).toBe('DeadlockDetected');
    expect([await balance(1), await balance(2)]).toEqual([100, 100]);
  });

  it('55P03 under lockTimeout is retried until RetriesExhausted, with its history', async () => {
    const { tm, db } = await setup({ defaults: noBackoff });
    const holder = await admin.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT * FROM accounts WHERE id = 1 FOR UPDATE');
      let calls = 0;
      const result = await tm.do(
        async () => {
          calls++;
          await db.addToBalance(1, 1);
        },
        { lockTimeout: 50, maxAttempts: 2 },
      );
      const error = result._unsafeUnwrapErr() as RetriesExhausted;
      expect(error.kind).toBe('RetriesExhausted');
      expect(error.attempts).toBe(2);
      expect(error.history.map((h) => [h.kind, h.code])).toEqual([
        ['LockNotAvailable', '55P03'],
        ['LockNotAvailable', '55P03'],
      ]);
      expect(calls).toBe(2);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });

  it('afterCommit runs once, after the attempt that committed', async () => {
    const { tm, db } = await setup({ defaults: noBackoff });
    const ran: number[] = [];
    const result = await tm.do(async (tx) => {
      tx.afterCommit(() => void ran.push(tx.attempt));
      await db.addToBalance(1, 1);
      if (tx.attempt === 1) await db.raise('40001');
      return tx.attempt;
    });
    expect(result._unsafeUnwrap()).toBe(2);
    expect(ran).toEqual([2]);
    expect(await balance(1)).toBe(101);
  });

  it("a unique violation of the builder's INSERT is UniqueViolation, or the service's own error through constraints", async () => {
    const { tm, db } = await setup();
    await db.insertUser('a@example.com');
    const plain = await tm.do(() => db.insertUser('a@example.com'));
    const violation = plain._unsafeUnwrapErr() as UniqueViolation;
    expect(violation.kind).toBe('UniqueViolation');
    expect(violation.constraint).toBe('users_email_key');
    const mapped = await setup({ constraints: { users_email_key: () => new EmailTaken('taken') } });
    const domain = await mapped.tm.do(() => mapped.db.insertUser('a@example.com'));
    expect(domain._unsafeUnwrapErr()).toBeInstanceOf(EmailTaken);
  });

  it("the builder's transaction() inside tm.do joins it (required): same transaction, no BEGIN/COMMIT of its own", async () => {
    const { tm, db } = await setup();
    const result = await tm.do(async (tx) => {
      const outer = (await tx.query<{ id: string }>('SELECT txid_current()::text AS id')).rows[0]?.id;
      const inner = await db.transaction(async (trx) => {
        await trx.addToBalance(1, 7);
        return trx.txid();
      });
      return { outer, inner };
    });
    const { outer, inner } = result._unsafeUnwrap();
    expect(inner).toBe(outer);
    expect(await balance(1)).toBe(107);
    expect(transactionControl()).toEqual([expect.stringMatching(/^BEGIN/), 'COMMIT']);
  });

  it("a failure inside the builder's joined transaction rolls back the whole tm.do (required)", async () => {
    const { tm, db } = await setup();
    const boom = new Error('boom');
    const outcome = await tm
      .do(async () => {
        await db.addToBalance(2, 1);
        await db.transaction(async (trx) => {
          await trx.addToBalance(1, 7);
          throw boom;
        });
      })
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    expect(outcome).toBe(boom);
    expect([await balance(1), await balance(2)]).toEqual([100, 100]);
  });

  it("with propagation 'nested', the builder's transaction is a savepoint: its rollback undoes only its work", async () => {
    const { tm, db } = await setup({}, 'nested');
    const result = await tm.do(async () => {
      await db.addToBalance(2, 1);
      const inner = await db
        .transaction(async (trx) => {
          await trx.addToBalance(1, 7);
          throw new Error('inner fails');
        })
        .catch((error: unknown) => (error as Error).message);
      return inner;
    });
    expect(result._unsafeUnwrap()).toBe('inner fails');
    expect([await balance(1), await balance(2)]).toEqual([100, 101]);
    expect(transactionControl()).toEqual([expect.stringMatching(/^BEGIN/), 'COMMIT']);
    expect(log.texts.filter((t) => /SAVEPOINT/i.test(t))).toEqual([
      'SAVEPOINT "pg_txkit_sp_1"',
      'ROLLBACK TO SAVEPOINT "pg_txkit_sp_1"; RELEASE SAVEPOINT "pg_txkit_sp_1"',
    ]);
  });

  it("with propagation 'nested', the outer builder instance is refused while the builder's savepoint is open (nothing sent)", async () => {
    const { tm, db } = await setup({}, 'nested');
    // A repository that imports the builder instance, called inside the builder's transaction: its query
    // would run inside the savepoint (and be undone with it) without belonging to it. Use the trx.
    const outcome = await tm
      .do(async () => {
        await db.transaction(async () => {
          await db.addToBalance(1, 7);
        });
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect((outcome as { reason?: string } | undefined)?.reason).toBe('concurrent-scope');
    expect(await balance(1)).toBe(100);
    expect(log.texts.filter((t) => /UPDATE/i.test(t))).toEqual([]);
  });

  it("the builder's nested transaction inside its transaction rolls back to its own savepoint", async () => {
    const { tm, db } = await setup();
    const result = await tm.do(() =>
      db.transaction(async (trx) => {
        if (trx.nested === undefined) return 'no nested transactions in this builder';
        await trx.addToBalance(2, 1);
        await trx
          .nested(async (inner) => {
            await inner.addToBalance(1, 7);
            throw new Error('inner fails');
          })
          .catch(() => {});
        return trx.nested(async (inner) => {
          await inner.addToBalance(1, 3);
          return 'kept';
        });
      }),
    );
    if (result._unsafeUnwrap() === 'no nested transactions in this builder') return;
    expect(result._unsafeUnwrap()).toBe('kept');
    expect([await balance(1), await balance(2)]).toEqual([103, 101]);
    expect(transactionControl()).toEqual([expect.stringMatching(/^BEGIN/), 'COMMIT']);
  });

  it("outside tm.do the builder's transaction() is a plain transaction of the manager: commits, or rolls back, once, never retried", async () => {
    const { db } = await setup({ defaults: noBackoff });
    await db.transaction(async (trx) => {
      await trx.addToBalance(1, 5);
      await trx.addToBalance(2, -5);
    });
    expect([await balance(1), await balance(2)]).toEqual([105, 95]);
    let calls = 0;
    const failed = await db
      .transaction(async (trx) => {
        calls++;
        await trx.addToBalance(1, 5);
        await trx.raise('40001');
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(calls).toBe(1);
    expect(failed).toBeDefined();
    expect(await balance(1)).toBe(105);
    // The manager's BEGIN and COMMIT / ROLLBACK, nothing from the builder.
    expect(transactionControl()).toEqual([
      expect.stringMatching(/^BEGIN/),
      'COMMIT',
      expect.stringMatching(/^BEGIN/),
      'ROLLBACK',
    ]);
  });

  it.each(['COMMIT', 'END', 'COMMIT AND CHAIN', 'UPDATE accounts SET balance = 0; COMMIT'])(
    'inside tm.do, %j written as raw SQL through the builder is refused before it is sent; nothing is committed',
    async (text) => {
      const { tm, db } = await setup();
      let caught: unknown;
      const outcome = await tm
        .do(async () => {
          await db.addToBalance(1, 5);
          await db.rawSql(text).catch((error: unknown) => {
            caught = error;
          });
          return 'ok';
        })
        .then(
          (value) => value,
          (error: unknown) => error,
        );
      expect(outcome).toBeInstanceOf(TxUsageError);
      expect((outcome as TxUsageError).reason).toBe('transaction-control');
      expect(caught).toBeDefined();
      expect(log.texts).not.toContain(text);
      expect(await balance(1)).toBe(100);
    },
  );

  it("outside tm.do, a COMMIT of the builder's transaction refused with 40001 rejects with SerializationFailure, once", async () => {
    const { db } = await setup({ defaults: { isolation: 'serializable', ...noBackoff } });
    const g = gate();
    const other = await admin.connect();
    let calls = 0;
    try {
      await other.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
      await other.query('SELECT count(*) FROM doctors WHERE on_call');
      const done = db
        .transaction(async (trx) => {
          calls++;
          if ((await trx.onCallCount(1)) < 2) return;
          await trx.goOffCall(1, 'bob');
          await g.at('before-commit');
        })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      await g.reached('before-commit');
      await other.query("UPDATE doctors SET on_call = false WHERE name = 'alice'");
      await other.query('COMMIT');
      g.open('before-commit');
      // Outside tm.do the error is the builder's to give: drizzle wraps it in DrizzleQueryError as it wraps
      // pg's (the typed error is its cause); the others give it as it is.
      const failed = await done;
      expect(kindOf(failed) ?? kindOf((failed as { cause?: unknown }).cause)).toBe('SerializationFailure');
    } finally {
      other.release();
    }
    expect(calls).toBe(1);
    const onCall = await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM doctors WHERE on_call');
    expect(onCall.rows[0]?.n).toBe(1);
  });

  it("updateWhere takes the builder's compiled query: the action and its condition in one statement", async () => {
    const { tm, db } = await setup();
    const debited = await tm.do(() => updateWhere(tm.db(), db.compileDebit(1, 60)));
    expect(debited._unsafeUnwrap()).toEqual([{ id: 1, balance: 40 }]);
    const refused = await tm.do(() => updateWhere(tm.db(), db.compileDebit(1, 60)));
    expect(kindOf(refused._unsafeUnwrapErr())).toBe('ConditionFailed');
    expect(await balance(1)).toBe(40);
  });

  it('lockRows, then the builder writes the locked rows in the same transaction', async () => {
    const { tm, db } = await setup();
    const g = gate();
    const done = tm.do(async () => {
      const locked = await lockRows(tm.db(), { table: 'accounts', key: 'id', ids: [2, 1] });
      if (locked.isErr()) return locked;
      await db.addToBalance(1, -30);
      await db.addToBalance(2, 30);
      await g.at('locked');
      return 'moved';
    });
    await g.reached('locked');
    // Another session cannot take the rows while the transaction holds them.
    const probe = await admin.connect();
    try {
      await probe.query('BEGIN');
      const tried = await probe
        .query('SELECT id FROM accounts WHERE id = 1 FOR UPDATE NOWAIT')
        .catch((e: unknown) => e);
      expect((tried as { code?: string }).code).toBe('55P03');
      await probe.query('ROLLBACK');
    } finally {
      probe.release();
    }
    g.open('locked');
    expect((await done)._unsafeUnwrap()).toBe('moved');
    expect([await balance(1), await balance(2)]).toEqual([70, 130]);
  });

  it('insertOnce composes with the builder in one transaction', async () => {
    const { tm, db } = await setup();
    const run = () =>
      tm.doOrThrow(async () => {
        const once = await insertOnce(tm.db(), {
          table: 'users',
          values: { email: 'once@example.com' },
          conflict: ['email'],
        });
        await db.addToBalance(1, 1);
        return once._unsafeUnwrap().created;
      });
    expect(await run()).toBe(true);
    expect(await run()).toBe(false);
    expect(await balance(1)).toBe(102);
  });

  describe('the outbox', () => {
    let queue: Queue<{ receipt: z.ZodObject<{ account: z.ZodNumber }> }>;
    let tm: TxManager<Record<string, unknown>>;
    let db: BuilderInstance;
    const schema = `q_builders_${builder.name.toLowerCase()}`;
    beforeAll(async () => {
      ({ tm, db } = await setup());
      queue = new Queue({
        pool,
        txManager: tm,
        schema,
        tasks: { receipt: z.object({ account: z.number() }) },
      });
      (await queue.migrate())._unsafeUnwrap();
    });
    afterAll(async () => {
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    });
    const jobs = async (): Promise<number> =>
      (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.jobs`)).rows[0]?.n ?? -1;

    it('queue.enqueue(tm.db(), …) in a transaction the builder writes: the job exists iff the writes commit', async () => {
      await tm.doOrThrow(async () => {
        await db.addToBalance(1, -10);
        (await queue.enqueue(tm.db(), 'receipt', { account: 1 }))._unsafeUnwrap();
      });
      expect(await jobs()).toBe(1);
      const failed = await tm
        .do(async () => {
          await db.addToBalance(1, -10);
          (await queue.enqueue(tm.db(), 'receipt', { account: 1 }))._unsafeUnwrap();
          await db.insertUser('dup@example.com');
          await db.insertUser('dup@example.com');
        })
        .then((r) => kindOf(r._unsafeUnwrapErr()));
      expect(failed).toBe('UniqueViolation');
      expect(await jobs()).toBe(1);
      expect(await balance(1)).toBe(90);
    });
  });

  it('a non-database error of the callback (an HTTP client’s ECONNRESET) runs once and rejects unchanged', async () => {
    const { tm, db } = await setup();
    const thrown = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    let calls = 0;
    const outcome = await tm
      .do(async () => {
        calls++;
        await db.addToBalance(1, 1);
        throw thrown;
      })
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    expect(calls).toBe(1);
    expect(outcome).toBe(thrown);
    expect(await balance(1)).toBe(100);
  });
});
