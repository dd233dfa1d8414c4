import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UniqueViolation } from '../../src/errors/index.js';
import { drizzleClient } from '../../src/integrations/drizzle/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
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
      // Nothing at all was sent: the callback sent no statement, so neither BEGIN nor COMMIT went out.
      expect(log.texts).toEqual([]);
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
});

describe('a tm.do callback that returns a drizzle query without awaiting it', () => {
  it('runs it in the transaction (drizzle queries are lazy thenables)', async () => {
    const tm = new TxManager(pool);
    const db = drizzle({ client: drizzleClient(tm) });
    const result = await tm.do(() => db.insert(items).values({ id: 1, label: 'a' }), { readOnly: true });
    // Refused by the read-only transaction: it ran there, not on the pool.
    expect(result.isErr() && result.error.kind).toBe('ReadOnlyTransaction');
    expect(await ids()).toEqual([]);
  });
});
