// Job groups and rate limits: bad input is refused with InvalidOptions before any SQL (nothing sent,
// nothing inserted), and a queue migrated to version 2 with jobs in it upgrades to groups.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase({ max: 4 });
const pools: pg.Pool[] = [];
afterAll(() => Promise.all(pools.map((p) => p.end())));
const tasks = { email: z.object({ to: z.string() }) };
let seq = 0;

/** A migrated queue whose pool records every statement it sends. */
async function countingQueue() {
  const schema = `q_ginput_${++seq}`;
  (await new Queue({ pool, txManager: new TxManager(pool), schema, tasks }).migrate())._unsafeUnwrap();
  const sent: string[] = [];
  const counting = new pg.Pool({ connectionString: url, max: 2 });
  pools.push(counting);
  const query = counting.query.bind(counting) as (...args: unknown[]) => unknown;
  Object.assign(counting, {
    query: (...args: unknown[]) => {
      sent.push(String(args[0]));
      return query(...args);
    },
  });
  const queue = new Queue({
    pool: counting,
    txManager: new TxManager(counting),
    schema,
    tasks,
    groups: { default: { concurrency: 1 } },
  });
  const count = async () =>
    (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.jobs`)).rows[0]?.n;
  return { queue, sent, count, schema };
}

describe('bad input', () => {
  it('enqueue: an empty group, a group with NUL, a non-string group → InvalidOptions, nothing sent', async () => {
    const { queue, sent, count } = await countingQueue();
    for (const group of ['', 'a\u0000b', 'x'.repeat(1001), 42 as unknown as string]) {
      const r = await queue.enqueue(counting(queue), 'email', { to: 'a' }, { group });
      expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    }
    expect(sent).toEqual([]);
    expect(await count()).toBe(0);
  });

  it('enqueueMany: group and groups together, groups of the wrong length, a bad group → InvalidOptions, nothing sent', async () => {
    const { queue, sent, count } = await countingQueue();
    const db = counting(queue);
    const both = await queue.enqueueMany(db, 'email', [{ to: 'a' }], { group: 'g', groups: ['g'] });
    expect(both._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const short = await queue.enqueueMany(db, 'email', [{ to: 'a' }, { to: 'b' }], { groups: ['g'] });
    expect(short._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const bad = await queue.enqueueMany(db, 'email', [{ to: 'a' }, { to: 'b' }], { groups: ['g', ''] });
    expect(bad._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(sent).toEqual([]);
    expect(await count()).toBe(0);
  });

  it('new Queue: invalid limits throw InvalidOptions (a configuration error), before any SQL', () => {
    const base = { pool, txManager: new TxManager(pool), tasks };
    const invalid: unknown[] = [
      { default: { concurrency: 0 } },
      { default: {} },
      { g: { concurrency: 1.5 } },
      { g: { rate: { limit: 0, per: '1s' } } },
      { g: { rate: { limit: 10, per: 0 } } },
      { g: { rate: { limit: 10, per: 'soon' } } },
      { g: { rate: { limit: 10_001, per: '1s' } } },
      { g: { concurrency: 1, extra: true } },
      { '': { concurrency: 1 } },
    ];
    for (const groups of invalid) {
      expect(() => new Queue({ ...base, groups } as never)).toThrowError(
        expect.objectContaining({ kind: 'InvalidOptions' }),
      );
    }
    expect(() => new Queue({ ...base, taskRates: { email: { limit: -1, per: '1s' } } })).toThrowError(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
  });
});

/** The queue's own pool (the counting one). */
function counting(queue: Queue<typeof tasks>): pg.Pool {
  return queue.pool;
}
