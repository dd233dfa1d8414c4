import fc from 'fast-check';
import { err, ok } from 'neverthrow';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import type { Isolation } from '../../src/tx/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Tx } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import { expectClean } from '../integration/tx-support.js';

const { pool, url } = await useTestDatabase({ max: 8 });

beforeAll(async () => {
  await pool.query('CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)');
});

afterEach(async () => {
  await expectClean(pool, url);
});

interface Transfer {
  readonly from: number;
  readonly to: number;
  readonly amount: number;
  readonly isolation: Isolation;
}

const ACCOUNTS = 3;
const INITIAL = 100;

const transferArb = fc
  .record({
    from: fc.integer({ min: 1, max: ACCOUNTS }),
    to: fc.integer({ min: 1, max: ACCOUNTS }),
    amount: fc.integer({ min: 1, max: 70 }),
    isolation: fc.constantFrom<Isolation>('read committed', 'repeatable read', 'serializable'),
  })
  .filter((t) => t.from !== t.to);

/** Yield to the event loop between read and write so concurrent transfers interleave there. */
const yieldNow = () => new Promise<void>((resolve) => setImmediate(resolve));

type Balances = Map<number, number>;

async function readBalances(db: Tx, ids: readonly number[], lock: boolean): Promise<Balances> {
  // FOR NO KEY UPDATE (read committed only): locks the rows we are about to write, in id order, so
  // concurrent transfers queue instead of overwriting each other (and cannot deadlock). No key column
  // changes, so NO KEY UPDATE is enough and does not block foreign-key checks.
  const sql = `SELECT id, balance FROM accounts WHERE id = ANY($1::int[]) ORDER BY id${lock ? ' FOR NO KEY UPDATE' : ''}`;
  const { rows } = await db.query<{ id: number; balance: number }>(sql, [[...ids].sort((a, b) => a - b)]);
  return new Map(rows.map((r) => [r.id, r.balance]));
}

/**
 * Read in the application, decide, write the computed balances back. Correct only because of the
 * manager: at repeatable read / serializable a concurrent change makes the write (or COMMIT) fail
 * with 40001 and the whole callback is re-run; at read committed the rows are locked first.
 */
function transferWith(tm: TxManager, t: Transfer, naive: boolean) {
  return tm.do(
    async (tx) => {
      const lock = !naive && t.isolation === 'read committed';
      const balances = await readBalances(tx, [t.from, t.to], lock);
      await yieldNow();
      const from = balances.get(t.from) ?? 0;
      const to = balances.get(t.to) ?? 0;
      if (from < t.amount) return err(new ConditionFailed(0));
      // Writes in id order, like the locks: transfers never deadlock each other (no 1 s deadlock_timeout).
      const writes: [number, number][] = [
        [t.from, from - t.amount],
        [t.to, to + t.amount],
      ];
      writes.sort((a, b) => a[0] - b[0]);
      for (const [id, balance] of writes) {
        // Row lock (FOR NO KEY UPDATE mode) until the end of the transaction.
        await tx.query('UPDATE accounts SET balance = $2 WHERE id = $1', [id, balance]);
      }
      return ok(t.amount);
    },
    naive
      ? { isolation: 'read committed', maxAttempts: 1 }
      : { isolation: t.isolation, maxAttempts: 50, backoff: { baseMs: 1, capMs: 20 } },
  );
}

/** Runs the transfers concurrently and checks the invariants; returns a description of what broke. */
async function runTransfers(transfers: readonly Transfer[], naive: boolean): Promise<string | undefined> {
  await pool.query('TRUNCATE accounts');
  await pool.query('INSERT INTO accounts SELECT g, $1 FROM generate_series(1, $2::int) g', [
    INITIAL,
    ACCOUNTS,
  ]);
  const tm = new TxManager(pool, { hooks: { onRetry: (e) => retries.push(e.error.kind) } });
  const results = await Promise.all(transfers.map((t) => transferWith(tm, t, naive)));
  const expected = new Map<number, number>();
  for (let id = 1; id <= ACCOUNTS; id++) expected.set(id, INITIAL);
  results.forEach((result, i) => {
    const t = transfers[i];
    if (!t) return;
    // An Err (insufficient funds, or retries exhausted) rolled back: it moved nothing.
    if (result.isOk()) {
      expected.set(t.from, (expected.get(t.from) ?? 0) - t.amount);
      expected.set(t.to, (expected.get(t.to) ?? 0) + t.amount);
    }
  });
  const { rows } = await pool.query<{ id: number; balance: number }>(
    'SELECT id, balance FROM accounts ORDER BY id',
  );
  const total = rows.reduce((sum, r) => sum + r.balance, 0);
  if (total !== INITIAL * ACCOUNTS) return `total ${total} != ${INITIAL * ACCOUNTS}`;
  const negative = rows.find((r) => r.balance < 0);
  if (negative) return `account ${negative.id} is negative (${negative.balance})`;
  const mismatch = rows.find((r) => r.balance !== expected.get(r.id));
  if (mismatch)
    return `account ${mismatch.id} is ${mismatch.balance}, committed transfers say ${expected.get(mismatch.id)}`;
  return undefined;
}

/** Kinds of every retry the manager made (proves the retry machinery is what the property exercises). */
const retries: string[] = [];

const scenario = fc.array(transferArb, { minLength: 8, maxLength: 16 });

describe('bank transfers through TxManager', () => {
  it('keep the total constant, no balance negative, and every committed transfer accounted for', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (transfers) => {
        expect(await runTransfers(transfers, false)).toBeUndefined();
      }),
      { numRuns: 12 },
    );
    expect(pool.totalCount - pool.idleCount).toBe(0);
    expect(retries).toContain('SerializationFailure');
  });

  it('naive control: read in the app and write back at read committed without locks or retries is caught', async () => {
    retries.length = 0;
    const outcome = await fc.check(
      fc.asyncProperty(scenario, async (transfers) => {
        expect(await runTransfers(transfers, true)).toBeUndefined();
      }),
      { numRuns: 12, endOnFailure: true },
    );
    expect(outcome.failed).toBe(true);
    expect(String(outcome.errorInstance)).toMatch(/total|negative|committed transfers say/);
    expect(retries).toEqual([]); // maxAttempts 1: the naive side never retries
  });
});
