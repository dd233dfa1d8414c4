import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { lockReport } from '../../src/diagnostics/lock-report.js';
import { Bookings } from '../../src/patterns/bookings.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

// The README's setup with the pool shrunk to what a serverless function often gets: `max: 1` or
// `max: 2`. Every pattern either works or refuses with a typed error; nothing waits on itself.
const { pool: admin, url } = await useTestDatabase();
await admin.query(`CREATE TABLE log (name text PRIMARY KEY);
  CREATE TABLE rooms (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL);
  CREATE TABLE receipts (order_id int PRIMARY KEY)`);

const pools: pg.Pool[] = [];
/** The README's pool, with `max` pg clients. */
function smallPool(max: 1 | 2): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pools.push(pool);
  return pool;
}

afterEach(async () => {
  await admin.query('TRUNCATE log, rooms, receipts');
  // Nothing checked out and nothing idle in transaction once a scenario is over.
  for (const pool of pools) expect(pool.totalCount - pool.idleCount).toBe(0);
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
  );
  expect(rows[0]?.n).toBe(0);
});
afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
});

const names = async () =>
  (await admin.query<{ name: string }>('SELECT name FROM log ORDER BY name')).rows.map((r) => r.name);

describe('TxManager on a pool of 1', () => {
  it('required and nested scopes share the one client; concurrent do() calls queue for it and all commit', async () => {
    const tm = new TxManager(smallPool(1));
    const outcome = await tm.doOrThrow(async (tx) => {
      await tx.query("INSERT INTO log VALUES ('outer')");
      await tm.doOrThrow((inner) => inner.query("INSERT INTO log VALUES ('required')"));
      const nested = await tm
        .do(
          async (sp) => {
            await sp.query("INSERT INTO log VALUES ('nested-rolled-back')");
            throw new Error('boom'); // a defect: the savepoint rolls back, do() rejects
          },
          { propagation: 'nested' },
        )
        .then(
          () => 'resolved',
          (error: unknown) => (error instanceof Error ? error.message : 'other'),
        );
      return nested;
    });
    expect(outcome).toBe('boom');
    const many = await Promise.all(
      ['a', 'b', 'c', 'd'].map((n) => tm.doOrThrow((tx) => tx.query('INSERT INTO log VALUES ($1)', [n]))),
    );
    expect(many).toHaveLength(4);
    expect(await names()).toEqual(['a', 'b', 'c', 'd', 'outer', 'required']);
  });

  it('requiresNew inside a transaction fails fast with PoolExhausted (it needs a second client); the outer one goes on', async () => {
    const tm = new TxManager(smallPool(1));
    const kinds = await tm.doOrThrow(async (tx) => {
      await tx.query("INSERT INTO log VALUES ('outer')");
      const inner = await tm.do((t) => t.query("INSERT INTO log VALUES ('inner')"), {
        propagation: 'requiresNew',
      });
      return inner.isErr() ? inner.error.kind : 'ok';
    });
    expect(kinds).toBe('PoolExhausted');
    expect(await names()).toEqual(['outer']);
    // Outside a transaction requiresNew is an ordinary transaction: one client is enough.
    (
      await tm.do((t) => t.query("INSERT INTO log VALUES ('alone')"), { propagation: 'requiresNew' })
    )._unsafeUnwrap();
    expect(await names()).toEqual(['alone', 'outer']);
  });

  it('on a pool of 2 requiresNew gets the second client and commits on its own', async () => {
    const tm = new TxManager(smallPool(2));
    await tm
      .do(async (tx) => {
        await tx.query("INSERT INTO log VALUES ('outer-rolled-back')");
        (
          await tm.do((t) => t.query("INSERT INTO log VALUES ('inner')"), { propagation: 'requiresNew' })
        )._unsafeUnwrap();
        throw new Error('outer fails');
      })
      .then(
        () => expect.unreachable('the outer transaction threw'),
        (error: unknown) => expect(error).toMatchObject({ message: 'outer fails' }),
      );
    expect(await names()).toEqual(['inner']);
  });
});

describe('patterns on a pool of 1', () => {
  it('withAdvisoryLock: alone, inside a transaction, and two callers one after the other', async () => {
    const tm = new TxManager(smallPool(1));
    const key = advisoryKey('small-pool', 'report');
    const alone = await withAdvisoryLock(tm, key, (tx) => tx.query("INSERT INTO log VALUES ('alone')"));
    expect(alone.isOk()).toBe(true);
    const joined = await tm.doOrThrow(async (tx) => {
      await tx.query("INSERT INTO log VALUES ('outer')");
      const r = await withAdvisoryLock(tm, key, async (locked) => {
        expect(locked).toBe(tx); // joins the transaction: no second client asked for
        return 'locked';
      });
      return r._unsafeUnwrap();
    });
    expect(joined).toBe('locked');
    const both = await Promise.all(
      ['x', 'y'].map((n) => withAdvisoryLock(tm, key, (tx) => tx.query('INSERT INTO log VALUES ($1)', [n]))),
    );
    expect(both.every((r) => r.isOk())).toBe(true);
    expect(await names()).toEqual(['alone', 'outer', 'x', 'y']);
  });

  it('SessionLock holds a connection of its own: the pool of 1 stays usable, even while its client is in a transaction', async () => {
    const pool = smallPool(1);
    const tm = new TxManager(pool);
    const key = advisoryKey('small-pool', 'leader');
    await tm.doOrThrow(async (tx) => {
      const lock = (await SessionLock.acquire(pool, key, { pooler: 'direct' }))._unsafeUnwrap();
      try {
        expect(lock.held).toBe(true);
        expect(pool.totalCount).toBe(1); // the transaction's client; the lock's session is not a slot
        await tx.query("INSERT INTO log VALUES ('while-leader')");
        const busy = await SessionLock.acquire(pool, key, { pooler: 'direct' });
        expect(busy._unsafeUnwrapErr().kind).toBe('LockBusy');
      } finally {
        await lock.release();
      }
    });
    expect(await names()).toEqual(['while-leader']);
  });

  it('IdempotencyKeys: migrate, run inside and outside a transaction, replay, concurrent duplicates', async () => {
    const pool = smallPool(1);
    const tm = new TxManager(pool);
    const keys = new IdempotencyKeys(tm, { table: 'requests' });
    (await keys.migrate())._unsafeUnwrap();
    const pay = (name: string) => async (tx: { query: pg.Pool['query'] }) => {
      await tx.query('INSERT INTO log VALUES ($1)', [name]);
      return { name };
    };
    expect((await keys.run('k1', pay('k1')))._unsafeUnwrap()).toEqual({
      result: { name: 'k1' },
      replayed: false,
    });
    const inside = await tm.doOrThrow(async () => (await keys.run('k1', pay('k1-again')))._unsafeUnwrap());
    expect(inside).toEqual({ result: { name: 'k1' }, replayed: true });
    const racers = await Promise.all([1, 2, 3].map(() => keys.run('k2', pay('k2'))));
    expect(racers.map((r) => r._unsafeUnwrap().replayed).sort()).toEqual([false, true, true]);
    expect((await keys.expire('7d'))._unsafeUnwrap()).toBe(0);
    expect(await names()).toEqual(['k1', 'k2']);
  });

  it('Bookings: migrate, book, and an overlap refused, all through the one client', async () => {
    const pool = smallPool(1);
    const tm = new TxManager(pool);
    const rooms = new Bookings({ table: 'rooms', resource: 'room', during: 'during' });
    (await rooms.migrate(pool))._unsafeUnwrap();
    const at = (h: number) => new Date(Date.UTC(2030, 0, 1, h));
    const results = await Promise.all(
      [10, 10, 11].map((h) => tm.do((tx) => rooms.book(tx, { resource: 1, from: at(h), to: at(h + 1) }))),
    );
    expect(results.map((r) => (r.isOk() ? 'ok' : r.error.kind)).sort()).toEqual(['Overlap', 'ok', 'ok']);
  });

  it('lockReport runs on a pool of 1', async () => {
    const report = await lockReport(smallPool(1));
    expect(report.isOk()).toBe(true);
  });
});

describe('queue on a pool of 1', () => {
  const tasks = { receipt: z.object({ orderId: z.number().int() }) };

  it.each([
    { listen: true, concurrency: 4 },
    { listen: false, concurrency: 1 },
  ])(
    'enqueue in a transaction, then a worker ($concurrency slot(s), listen $listen) runs every job and stops',
    async ({ listen, concurrency }) => {
      const pool = smallPool(1);
      const tm = new TxManager(pool);
      const queue = new Queue({ pool, txManager: tm, schema: `q_small_${concurrency}`, tasks });
      (await queue.migrate())._unsafeUnwrap();
      const orders = [1, 2, 3, 4, 5, 6];
      await tm.doOrThrow(async (tx) => {
        for (const orderId of orders) (await queue.enqueue(tx, 'receipt', { orderId }))._unsafeUnwrap();
      });
      let done = 0;
      let allDone: () => void = () => {};
      const finished = new Promise<void>((resolve) => {
        allDone = resolve;
      });
      const worker = queue.work(
        {
          receipt: async (job, ctx) => {
            const r = await ctx.transaction((tx) =>
              tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [job.payload.orderId]),
            );
            if (r.isErr()) throw r.error;
            if (++done === orders.length) allDone();
          },
        },
        { concurrency, listen, pollInterval: 50 },
      );
      await finished;
      await worker.stop();
      const { rows } = await admin.query<{ order_id: number }>(
        'SELECT order_id FROM receipts ORDER BY order_id',
      );
      expect(rows.map((r) => r.order_id)).toEqual(orders);
      expect((await queue.stats())._unsafeUnwrap()).toMatchObject({ pending: 0, running: 0 });
    },
  );
});

describe('job progress on a pool of 1', () => {
  it('ctx.progress awaited inside ctx.transaction (whose client is the only one) is refused with PoolExhausted, not a hang', async () => {
    const pool = smallPool(1);
    const tm = new TxManager(pool);
    const queue = new Queue({
      pool,
      txManager: tm,
      schema: 'q_small_progress',
      tasks: { receipt: z.object({ orderId: z.number().int() }) },
    });
    (await queue.migrate())._unsafeUnwrap();
    const job = (await queue.enqueue(pool, 'receipt', { orderId: 7 }))._unsafeUnwrap();
    let seen: (kind: string) => void = () => {};
    const progressOutcome = new Promise<string>((resolve) => {
      seen = resolve;
    });
    let finished: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      finished = resolve;
    });
    const worker = queue.work(
      {
        receipt: async (j, ctx) => {
          const r = await ctx.transaction(async (tx) => {
            const p = await ctx.progress({ step: 'charging' }); // needs a pool client: the tx holds the only one
            seen(p.isErr() ? p.error.kind : 'ok');
            await tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [j.payload.orderId]);
          });
          if (r.isErr()) throw r.error;
          finished();
        },
      },
      { concurrency: 1, listen: false, pollInterval: 50 },
    );
    expect(await progressOutcome).toBe('PoolExhausted');
    await done;
    await worker.stop();
    expect((await admin.query('SELECT 1 FROM q_small_progress.jobs WHERE id = $1', [job.id])).rowCount).toBe(
      0,
    );
    expect((await admin.query('SELECT order_id FROM receipts')).rows).toEqual([{ order_id: 7 }]);
  }, 15_000);
});
