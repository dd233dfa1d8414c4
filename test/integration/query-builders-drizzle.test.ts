import { eq, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NotInTransaction, UniqueViolation } from '../../src/errors/index.js';
import { drizzleClient } from '../../src/integrations/drizzle/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean } from './tx-support.js';

// drizzle's own transaction() through drizzleClient(tm): what it joins, what reaches the server.
const { pool, url } = await useTestDatabase();

const items = pgTable('items', { id: integer('id').primaryKey(), label: text('label').notNull() });

beforeAll(async () => {
  await pool.query('CREATE TABLE items (id int PRIMARY KEY, label text NOT NULL)');
});

afterEach(async () => {
  await pool.query('TRUNCATE items');
  await expectClean(pool, url);
});

/** A manager over a pool that records every statement its clients send. */
function recorded() {
  const { pool: counting, log } = countingPool(url);
  const tm = new TxManager(counting);
  return { tm, log, end: () => counting.end() };
}

const ids = async () =>
  (await pool.query<{ id: number }>('SELECT id FROM items ORDER BY id')).rows.map((r) => r.id);

/** Statements that start or end a transaction or touch a savepoint, as sent (lower-cased). */
const control = (texts: readonly string[]) =>
  texts
    .map((t) => t.trim().toLowerCase())
    .filter((t) => /^(begin|commit|rollback|savepoint|release|start|end|abort)\b/.test(t));

describe('drizzle transaction() inside tm.do', () => {
  it("'required' (default): joins the transaction; drizzle's BEGIN/COMMIT never reach the server", async () => {
    const { tm, log, end } = recorded();
    const db = drizzle({ client: drizzleClient(tm) });
    try {
      const outcome = tm.do(async () => {
        await db.insert(items).values({ id: 1, label: 'outer' });
        await db.transaction(async (trx) => {
          await trx.insert(items).values({ id: 2, label: 'inner' });
        });
        // Still one transaction: nothing is visible from another connection before the outer commit.
        expect(await ids()).toEqual([]);
        throw new Error('outer fails after drizzle committed its part');
      });
      await expect(outcome).rejects.toThrow('outer fails');
      expect(await ids()).toEqual([]);
      expect(control(log.texts)).toEqual(['begin isolation level read committed', 'rollback']);
    } finally {
      await end();
    }
  });

  it("'nested': a SAVEPOINT; a thrown callback rolls back only its own writes", async () => {
    const { tm, log, end } = recorded();
    const db = drizzle({ client: drizzleClient(tm, { propagation: 'nested' }) });
    try {
      await tm.doOrThrow(async () => {
        await db.insert(items).values({ id: 1, label: 'outer' });
        await expect(
          db.transaction(async (trx) => {
            await trx.insert(items).values({ id: 2, label: 'undone' });
            throw new Error('inner fails');
          }),
        ).rejects.toThrow('inner fails');
        await db.transaction(async (trx) => {
          await trx.insert(items).values({ id: 3, label: 'kept' });
        });
      });
      expect(await ids()).toEqual([1, 3]);
      const sent = control(log.texts);
      expect(sent.filter((t) => t === 'begin' || t === 'commit' || t === 'rollback')).toEqual(['commit']);
      expect(sent.filter((t) => t.startsWith('savepoint'))).toHaveLength(2);
    } finally {
      await end();
    }
  });

  it("'nested': the outer db is refused while drizzle's savepoint is open (nothing sent)", async () => {
    const tm = new TxManager(pool);
    const db = drizzle({ client: drizzleClient(tm, { propagation: 'nested' }) });
    const outcome = tm.do(async () => {
      await db.transaction(async () => {
        await db.insert(items).values({ id: 1, label: 'through the outer scope' });
      });
    });
    await expect(outcome).rejects.toBeInstanceOf(TxUsageError);
    expect(await ids()).toEqual([]);
  });

  it("drizzle's own nested trx.transaction() is a savepoint of the same transaction", async () => {
    const tm = new TxManager(pool);
    const db = drizzle({ client: drizzleClient(tm) });
    await tm.doOrThrow(async () => {
      await db.transaction(async (trx) => {
        await trx.insert(items).values({ id: 1, label: 'a' });
        await expect(
          trx.transaction(async (inner) => {
            await inner.insert(items).values({ id: 2, label: 'b' });
            throw new Error('undo b');
          }),
        ).rejects.toThrow('undo b');
      });
    });
    expect(await ids()).toEqual([1]);
  });

  it('a unique violation inside drizzle.transaction() comes back from tm.do as UniqueViolation', async () => {
    const tm = new TxManager(pool);
    const db = drizzle({ client: drizzleClient(tm) });
    const result = await tm.do(async () => {
      await db.transaction(async (trx) => {
        await trx.insert(items).values({ id: 1, label: 'a' });
        await trx.insert(items).values({ id: 1, label: 'again' });
      });
    });
    expect(result._unsafeUnwrapErr()).toBeInstanceOf(UniqueViolation);
    expect(await ids()).toEqual([]);
  });

  it('a stronger isolation than the joined transaction is refused before anything is sent', async () => {
    const { tm, log, end } = recorded();
    const db = drizzle({ client: drizzleClient(tm) });
    try {
      await tm.doOrThrow(async () => {
        const refused = await db
          .transaction(async (trx) => trx.insert(items).values({ id: 1, label: 'a' }), {
            isolationLevel: 'serializable',
          })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect((refused as { cause?: { kind?: unknown } }).cause?.kind).toBe('InvalidOptions');
      });
      expect(log.texts.map((t) => t.toLowerCase())).toEqual([
        'begin isolation level read committed',
        'commit',
      ]);
    } finally {
      await end();
    }
  });
});

describe('drizzle transaction() outside tm.do', () => {
  it('runs as one attempt of a transaction of the manager, with drizzle config and the manager defaults', async () => {
    const { pool: counting, log } = countingPool(url);
    const tm = new TxManager(counting, { defaults: { lockTimeout: '1500ms' } });
    const db = drizzle({ client: drizzleClient(tm) });
    try {
      const seen = await db.transaction(
        async (trx) => {
          await trx.insert(items).values({ id: 1, label: 'a' });
          const { rows } = await trx.execute<{ iso: string; lt: string }>(
            sql`SELECT current_setting('transaction_isolation') AS iso, current_setting('lock_timeout') AS lt`,
          );
          return rows[0];
        },
        { isolationLevel: 'repeatable read' },
      );
      expect(seen).toEqual({ iso: 'repeatable read', lt: '1500ms' });
      expect(await ids()).toEqual([1]);
      expect(control(log.texts)).toEqual([
        'begin isolation level repeatable read; set local lock_timeout = 1500',
        'commit',
      ]);
    } finally {
      await counting.end();
    }
  });

  it('a thrown callback rolls back and rejects with its error', async () => {
    const tm = new TxManager(pool);
    const db = drizzle({ client: drizzleClient(tm) });
    await expect(
      db.transaction(async (trx) => {
        await trx.insert(items).values({ id: 1, label: 'a' });
        throw new Error('no');
      }),
    ).rejects.toThrow('no');
    expect(await ids()).toEqual([]);
  });

  it("'mandatory': refused with NotInTransaction before anything is sent", async () => {
    const { pool: counting, log } = countingPool(url);
    const tm = new TxManager(counting);
    const db = drizzle({ client: drizzleClient(tm, { propagation: 'mandatory' }) });
    try {
      const error = await db
        .transaction(async (trx) => trx.insert(items).values({ id: 1, label: 'a' }))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect((error as { cause?: unknown }).cause).toBeInstanceOf(NotInTransaction);
      expect(log.texts).toEqual([]);
    } finally {
      await counting.end();
    }
  });
});

describe('drizzleClient outside any transaction', () => {
  it('queries run on the pool', async () => {
    const tm = new TxManager(pool);
    const db = drizzle({ client: drizzleClient(tm) });
    await db.insert(items).values({ id: 5, label: 'x' });
    expect(await db.select().from(items).where(eq(items.id, 5))).toEqual([{ id: 5, label: 'x' }]);
  });
});
