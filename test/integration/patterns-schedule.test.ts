import type { ResultAsync } from 'neverthrow';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { type LockRowsOptions, lockRows } from '../../src/patterns/lock-rows.js';
import { Schedule } from '../../src/testing/schedule.js';
import type { Queryable } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import { leftovers } from './patterns-support.js';

// Interleavings that matter, run with Schedule (isolation-tester semantics) on the exact statements the
// patterns send: a recording db captures lockRows' SQL without a server.
const { pool, url } = await useTestDatabase();
await pool.query('CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)');

beforeEach(async () => {
  await pool.query('TRUNCATE accounts; INSERT INTO accounts VALUES (1, 100), (2, 100), (3, 100)');
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

/** The statement a pattern would send (the recording db reports "in a transaction"). */
async function statementOf(
  run: (db: Queryable) => ResultAsync<unknown, unknown>,
): Promise<[string, unknown[]]> {
  let captured: [string, unknown[]] | undefined;
  const recorder = {
    getTransactionStatus: () => 'T',
    query: async (text: string, values?: unknown[]) => {
      captured ??= [text, values ?? []];
      return { rows: [], rowCount: 0, command: 'SELECT', oid: 0, fields: [] };
    },
  } as unknown as Queryable;
  await run(recorder);
  if (!captured) throw new Error('no statement sent');
  return captured;
}

const lockSql = (options: Omit<LockRowsOptions, 'table'>) =>
  statementOf((db) => lockRows(db, { table: 'accounts', ...options }));

async function withSchedule<T>(fn: (s: Schedule<'t1' | 't2'>) => Promise<T>): Promise<T> {
  const s = await Schedule.open(url, { sessions: ['t1', 't2'] });
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

const decrement = 'UPDATE accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2';

describe('Schedule: interleavings of the patterns', () => {
  it('a blocked conditional UPDATE re-checks its WHERE after the other commits and updates 0 rows', async () => {
    const out = await withSchedule((s) =>
      s.run([
        ['t1', 'begin'],
        ['t2', 'begin'],
        ['t1', decrement, [1, 60]],
        ['t2', decrement, [1, 60]], // waits for t1's row lock
        ['t1', 'commit'], // t2 wakes up, re-reads the row (balance 40) and its WHERE fails
        ['t2', 'commit'],
      ]),
    );
    expect(out[2]).toMatchObject({ status: 'ok', rowCount: 1, blocked: false });
    expect(out[3]).toMatchObject({ status: 'ok', rowCount: 0, blocked: true, completedAfter: 4 });
    expect((await pool.query('SELECT balance FROM accounts WHERE id = 1')).rows[0].balance).toBe(40);
  });

  it('lockRows NOWAIT fails at once with 55P03 instead of queueing', async () => {
    const [lock1, p1] = await lockSql({ ids: [1] });
    const [nowait, p2] = await lockSql({ ids: [2, 1], wait: 'nowait' });
    const out = await withSchedule((s) =>
      s.run([
        ['t1', 'begin'],
        ['t1', lock1, p1],
        ['t2', 'begin'],
        ['t2', nowait, p2],
        ['t2', 'rollback'],
        ['t1', 'commit'],
      ]),
    );
    expect(out[3]).toMatchObject({ status: 'error', code: '55P03', blocked: false });
  });

  it('lockRows SKIP LOCKED returns only the rows nobody holds, without waiting', async () => {
    const [lock1, p1] = await lockSql({ ids: [1] });
    const [skip, p2] = await lockSql({ ids: [3, 2, 1], wait: 'skipLocked' });
    const out = await withSchedule((s) =>
      s.run([
        ['t1', 'begin'],
        ['t1', lock1, p1],
        ['t2', 'begin'],
        ['t2', skip, p2],
        ['t2', 'commit'],
        ['t1', 'commit'],
      ]),
    );
    expect(out[3]).toMatchObject({ status: 'ok', blocked: false });
    expect(out[3]!.rows.map((r) => r.id)).toEqual([2, 3]);
  });

  it('opposite-order transfers: row-by-row locking deadlocks (40P01); lockRows in one statement never does', async () => {
    const naive = await withSchedule((s) =>
      s.run([
        ['t1', 'begin'],
        ['t2', 'begin'],
        ['t1', 'UPDATE accounts SET balance = balance - 10 WHERE id = 1'], // transfer 1 → 2
        ['t2', 'UPDATE accounts SET balance = balance - 10 WHERE id = 2'], // transfer 2 → 1
        ['t1', 'UPDATE accounts SET balance = balance + 10 WHERE id = 2'], // waits for t2
        ['t2', 'UPDATE accounts SET balance = balance + 10 WHERE id = 1'], // waits for t1: deadlock
        ['t1', 'rollback'],
        ['t2', 'rollback'],
      ]),
    );
    expect(naive.filter((o) => o.code === '40P01')).toHaveLength(1);

    const [lockA, pA] = await lockSql({ ids: [1, 2] }); // transfer 1 → 2
    const [lockB, pB] = await lockSql({ ids: [2, 1] }); // transfer 2 → 1: same statement, same order
    expect(lockA).toBe(lockB);
    const out = await withSchedule((s) =>
      s.run([
        ['t1', 'begin'],
        ['t2', 'begin'],
        ['t1', lockA, pA],
        ['t2', lockB, pB], // waits on row 1 while holding nothing
        ['t1', 'UPDATE accounts SET balance = balance - 10 WHERE id = 1'],
        ['t1', 'UPDATE accounts SET balance = balance + 10 WHERE id = 2'],
        ['t1', 'commit'],
        ['t2', 'UPDATE accounts SET balance = balance - 10 WHERE id = 2'],
        ['t2', 'UPDATE accounts SET balance = balance + 10 WHERE id = 1'],
        ['t2', 'commit'],
      ]),
    );
    expect(out.every((o) => o.status === 'ok')).toBe(true);
    expect(out[3]).toMatchObject({ blocked: true, completedAfter: 6 });
    const rows = await pool.query('SELECT id, balance FROM accounts WHERE id IN (1, 2) ORDER BY id');
    expect(rows.rows).toEqual([
      { id: 1, balance: 100 },
      { id: 2, balance: 100 },
    ]);
  });
});
