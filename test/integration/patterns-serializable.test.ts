import { err, ok } from 'neverthrow';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Isolation, Tx } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import { leftovers } from './patterns-support.js';

// Write skew: an invariant over a SET of rows ("at least one doctor on call", "no more guests than
// seats") that no single-row lock or constraint expresses. Two transactions read the same snapshot,
// each writes a different row, both commit. Only serializable (for every participant) + retry stops it.
const { pool } = await useTestDatabase();
const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 1, capMs: 20 } } });
await pool.query(`CREATE TABLE doctors (shift int, name text, on_call boolean NOT NULL, PRIMARY KEY (shift, name));
  CREATE TABLE rooms (id int PRIMARY KEY, capacity int NOT NULL);
  CREATE TABLE guests (id serial PRIMARY KEY, room_id int NOT NULL REFERENCES rooms, name text);
  CREATE INDEX ON guests (room_id)`);

beforeEach(async () => {
  await pool.query(`TRUNCATE doctors, guests, rooms;
    INSERT INTO doctors VALUES (1, 'alice', true), (1, 'bob', true);
    INSERT INTO rooms VALUES (1, 2)`);
});
afterAll(async () => expect(await leftovers(pool)).toEqual({ idleInTransaction: 0, checkedOut: 0 }));

/** Go off call if someone else stays on call (the rule lives in the application). */
const goOffCall = (name: string, g: ReturnType<typeof gate>) => async (tx: Tx) => {
  const { rows } = await tx.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM doctors WHERE shift = 1 AND on_call',
  );
  if (tx.attempt === 1) await g.at('read'); // both have read before either writes (first attempt only)
  if ((rows[0]?.n ?? 0) < 2) return err(new ConditionFailed());
  await tx.query('UPDATE doctors SET on_call = false WHERE shift = 1 AND name = $1', [name]);
  return ok(name);
};

async function race(isolation: Isolation) {
  const g = gate();
  const both = [tm.do(goOffCall('alice', g), { isolation }), tm.do(goOffCall('bob', g), { isolation })];
  await g.reached('read', 2);
  g.open('read');
  const results = await Promise.all(both);
  const onCall = (await pool.query('SELECT count(*)::int AS n FROM doctors WHERE shift = 1 AND on_call'))
    .rows[0].n;
  return { results, onCall: onCall as number };
}

describe('serializable invariants over sets of rows', () => {
  it('write skew breaks "at least one doctor on call" at read committed and repeatable read', async () => {
    for (const isolation of ['read committed', 'repeatable read'] as const) {
      await pool.query('UPDATE doctors SET on_call = true');
      const { results, onCall } = await race(isolation);
      expect(results.every((r) => r.isOk())).toBe(true);
      expect(onCall).toBe(0); // the anomaly: nobody on call
    }
  });

  it('serializable + retry keeps it: one goes off call, the retried one sees the change and refuses', async () => {
    let retries = 0;
    const counting = new TxManager(pool, {
      defaults: { backoff: { baseMs: 1, capMs: 20 } },
      hooks: { onRetry: () => void retries++ },
    });
    const g = gate();
    const both = [
      counting.do(goOffCall('alice', g), { isolation: 'serializable' }),
      counting.do(goOffCall('bob', g), { isolation: 'serializable' }),
    ];
    await g.reached('read', 2);
    g.open('read');
    const results = await Promise.all(both);
    expect(results.filter((r) => r.isOk())).toHaveLength(1);
    expect(results.filter((r) => r.isErr()).map((r) => r._unsafeUnwrapErr().kind)).toEqual([
      'ConditionFailed',
    ]);
    expect(retries).toBeGreaterThanOrEqual(1); // a 40001 happened and the whole callback re-ran
    const onCall = (await pool.query('SELECT count(*)::int AS n FROM doctors WHERE shift = 1 AND on_call'))
      .rows[0].n;
    expect(onCall).toBe(1);
  });

  it('room capacity: naive count-then-insert overfills at read committed; serializable + retry never does', async () => {
    const addGuest = (name: string, g: ReturnType<typeof gate>) => async (tx: Tx) => {
      const { rows } = await tx.query<{ n: number; capacity: number }>(
        'SELECT (SELECT count(*)::int FROM guests WHERE room_id = 1) AS n, capacity FROM rooms WHERE id = 1',
      );
      if (tx.attempt === 1) await g.at('counted');
      const row = rows[0]!;
      if (row.n >= row.capacity) return err(new ConditionFailed());
      await tx.query('INSERT INTO guests (room_id, name) VALUES (1, $1)', [name]);
      return ok(name);
    };
    for (const isolation of ['read committed', 'serializable'] as const) {
      await pool.query('TRUNCATE guests');
      const g = gate();
      const all = ['a', 'b', 'c', 'd'].map((n) => tm.do(addGuest(n, g), { isolation, maxAttempts: 10 }));
      await g.reached('counted', 4);
      g.open('counted');
      await Promise.all(all);
      const n = (await pool.query('SELECT count(*)::int AS n FROM guests')).rows[0].n;
      if (isolation === 'read committed')
        expect(n).toBe(4); // capacity 2: overfilled
      else expect(n).toBe(2);
    }
  });

  it('reports run READ ONLY DEFERRABLE: a consistent snapshot that can never fail with 40001', async () => {
    const report = await tm.do(
      async (tx) => {
        expect(tx.readOnly).toBe(true);
        const { rows } = await tx.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM doctors WHERE on_call',
        );
        const mode = await tx.query<{ transaction_deferrable: string }>('SHOW transaction_deferrable');
        return { onCall: rows[0]!.n, deferrable: mode.rows[0]!.transaction_deferrable };
      },
      { isolation: 'serializable', readOnly: true, deferrable: true },
    );
    expect(report._unsafeUnwrap()).toEqual({ onCall: 2, deferrable: 'on' });
  });
});
