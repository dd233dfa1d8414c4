import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { advisoryKey } from '../../src/advisory/advisory-key.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase({ max: 6 });
const tm = new TxManager(pool, { defaults: { maxAttempts: 1 } });
const KEYS = ['a', 'b', 'c', 'd'].map((k) => advisoryKey('multi-key', k));

/** Two transactions' key lists, each taking its first key before the other asks for more. */
const orders = fc
  .tuple(fc.shuffledSubarray(KEYS, { minLength: 2 }), fc.shuffledSubarray(KEYS, { minLength: 2 }))
  .filter(([o1, o2]) => o1[0] !== o2[0]);

/**
 * NAIVE: each transaction takes its keys one statement at a time, in its own order. Both take their
 * first key, then (both holding one) ask for the rest. Returns the SQLSTATEs of failed statements.
 */
async function naive(o1: readonly bigint[], o2: readonly bigint[]): Promise<string[]> {
  const c1 = await pool.connect();
  const c2 = await pool.connect();
  const codes: string[] = [];
  try {
    for (const c of [c1, c2]) {
      await c.query('BEGIN');
      // Detect the deadlock fast (superuser setting; the default is 1 s).
      await c.query("SET LOCAL deadlock_timeout = '20ms'");
    }
    await c1.query('SELECT pg_advisory_xact_lock($1)', [o1[0]!.toString()]);
    await c2.query('SELECT pg_advisory_xact_lock($1)', [o2[0]!.toString()]);
    const rest = async (c: typeof c1, keys: readonly bigint[]) => {
      try {
        for (const k of keys.slice(1)) await c.query('SELECT pg_advisory_xact_lock($1)', [k.toString()]);
        await c.query('COMMIT');
      } catch (e) {
        codes.push((e as { code?: string }).code ?? 'unknown');
        await c.query('ROLLBACK'); // frees the victim's locks at once; the other proceeds
      }
    };
    await Promise.all([rest(c1, o1), rest(c2, o2)]);
  } finally {
    c1.release();
    c2.release();
  }
  return codes;
}

/** PATTERN: the same two key lists through withAdvisoryLock (deduplicated, sorted, one statement). */
async function pattern(o1: readonly bigint[], o2: readonly bigint[]): Promise<string[]> {
  const results = await Promise.all([withAdvisoryLock(tm, o1, () => 1), withAdvisoryLock(tm, o2, () => 2)]);
  return results.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind);
}

afterAll(() => {
  expect(pool.totalCount - pool.idleCount).toBe(0);
});

describe('multi-key advisory locking never deadlocks', () => {
  it('naive control: per-key locking in caller order deadlocks for some orders (the property catches it)', async () => {
    const outcome = await fc.check(
      fc.asyncProperty(orders, async ([o1, o2]) => {
        expect(await naive(o1, o2)).toEqual([]);
      }),
      { numRuns: 60, seed: 7 },
    );
    expect(outcome.failed).toBe(true);
    expect(String(outcome.errorInstance)).toContain('40P01');
  });

  it('withAdvisoryLock: for every pair of orders, both transactions commit (no 40P01)', async () => {
    await fc.assert(
      fc.asyncProperty(orders, async ([o1, o2]) => {
        expect(await pattern(o1, o2)).toEqual([]);
      }),
      { numRuns: 60 },
    );
  });
});
