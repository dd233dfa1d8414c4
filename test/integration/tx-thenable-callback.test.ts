import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { expectClean } from './tx-support.js';

// A callback that RETURNS a query builder's lazy query instead of awaiting it: drizzle, Prisma and Knex
// queries are thenables whose `then` sends the SQL. Node calls that `then` from a microtask that does not
// carry the async context, so `tm.db()` inside it used to be the pool: the query ran outside the
// transaction, silently.
const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query('CREATE TABLE items (id int PRIMARY KEY)');
});

afterEach(async () => {
  await pool.query('TRUNCATE items');
  await expectClean(pool, url);
});

/** A lazy query as the builders make them: nothing is sent until `then`, then it runs on `tm.db()`. */
function lazy<T>(tm: TxManager, text: string, pick: (rows: Record<string, unknown>[]) => T): PromiseLike<T> {
  return {
    // biome-ignore lint/suspicious/noThenProperty: this IS a thenable, as a builder's query is.
    then(resolve, reject) {
      return tm
        .db()
        .query(text)
        .then((r) => pick(r.rows))
        .then(resolve, reject);
    },
  };
}

describe('a tm.do callback that returns a lazy query', () => {
  it('runs it in the transaction (its isolation level is the one read back)', async () => {
    const tm = new TxManager(pool);
    const isolation = await tm.doOrThrow(
      () => lazy(tm, "SELECT current_setting('transaction_isolation') AS v", (rows) => rows[0]?.v),
      { isolation: 'serializable' },
    );
    expect(isolation).toBe('serializable');
  });

  it('in a read-only transaction its INSERT is refused (25006) and nothing is written', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(() => lazy(tm, 'INSERT INTO items VALUES (1)', () => 'inserted'), {
      readOnly: true,
    });
    expect(result.isErr() && result.error.kind).toBe('ReadOnlyTransaction');
    expect((await pool.query('SELECT id FROM items')).rows).toEqual([]);
  });

  it("a 'nested' scope's lazy query runs inside its savepoint", async () => {
    const tm = new TxManager(pool);
    const rolledBack = await tm.doOrThrow(async () => {
      const inner = await tm.do(
        () => lazy(tm, 'INSERT INTO items VALUES (2) RETURNING 1/0 AS boom', () => 'never'),
        { propagation: 'nested' },
      );
      return inner.isErr() && inner.error.kind;
    });
    expect(rolledBack).toBe('DbError');
    expect((await pool.query('SELECT id FROM items')).rows).toEqual([]);
  });
});
