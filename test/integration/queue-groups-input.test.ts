// Job groups and rate limits: bad input is refused with InvalidOptions before any SQL (nothing sent,
// nothing inserted), and a queue migrated to version 2 with jobs in it upgrades to groups.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { queueAtVersion2 } from '../fixtures/queue-helpers.js';
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

describe('upgrade from version 2', () => {
  it('a queue at version 2 with pending and running jobs migrates to the newest version; its jobs still run; groups work', async () => {
    const schema = `q_gupgrade_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    // The schema as version 2 left it (migrate() of the previous release).
    await queueAtVersion2(pool, schema);
    await pool.query(
      `INSERT INTO ${s}.jobs (task, payload) SELECT 'email', '{"to":"old"}' FROM generate_series(1, 5)`,
    );
    // One job is running under the old version's claim when the upgrade happens.
    const running = await pool.query<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM ${s}.claim_jobs(1, 30000, ARRAY['email'])`,
    );
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema,
      tasks,
      groups: { default: { concurrency: 1 } },
    });
    const migrated = (await queue.migrate())._unsafeUnwrap();
    expect(migrated).toEqual({ applied: [3, 4, 5, 6, 7, 8, 9, 10, 11], version: 11 });
    // The job claimed before the upgrade completes under its lease.
    const old = running.rows[0];
    expect(old).toBeDefined();
    (await queue.complete({ id: String(old?.id), leaseToken: String(old?.lease_token) }))._unsafeUnwrap();
    // New grouped jobs: one per group at a time, next to the old ungrouped ones.
    (await queue.enqueueMany(pool, 'email', [{ to: 'a' }, { to: 'b' }], { group: 'g' }))._unsafeUnwrap();
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.filter((j) => j.group === null)).toHaveLength(4);
    expect(claimed.filter((j) => j.group === 'g')).toHaveLength(1);
    expect((await queue.completeMany(claimed))._unsafeUnwrap().completed).toHaveLength(5);
    const rest = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(rest.map((j) => j.group)).toEqual(['g']);
  });
});
