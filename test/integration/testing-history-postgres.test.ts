import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { checkHistory, FaultProxy, startPostgres } from '../../src/testing/index.js';
import { naiveListAppend, WORKLOAD_SCHEMA, writeSkewRegisters } from '../fixtures/history-workloads.js';
import { useTestDatabase } from '../helpers.js';

// What must hold: on real PostgreSQL workloads, the history checker finds the anomalies each level
// allows and none it forbids — a naive read-modify-write at READ COMMITTED loses updates (the
// naive control: the checker must catch it), write skew at REPEATABLE READ is G2-item, and
// SERIALIZABLE shows nothing, also when every connection is cut mid-round (FaultProxy) or the
// server restarts. Pairs of clients meet after their reads (a signal, not a sleep), so each round
// holds the interleaving that makes the anomaly possible.

const { url } = await useTestDatabase();
const setup = new pg.Client({ connectionString: url });
await setup.connect();
await setup.query(WORKLOAD_SCHEMA);
await setup.end();

const pools: pg.Pool[] = [];
function poolOn(connectionString: string): pg.Pool {
  const pool = new pg.Pool({ connectionString, max: 8 });
  pool.on('error', () => {}); // idle clients cut by a fault: the pool drops them
  pools.push(pool);
  return pool;
}
afterAll(async () => {
  for (const p of pools) await p.end().catch(() => {});
});

describe('checkHistory on PostgreSQL', () => {
  it('READ COMMITTED, naive read-modify-write: lost updates (the naive control), which read committed allows', async () => {
    const history = await naiveListAppend({
      pool: poolOn(url),
      isolation: 'READ COMMITTED',
      pairs: 3,
      rounds: 6,
    });
    const rc = checkHistory(history, { model: 'read-committed' });
    expect(rc.anomalyTypes).toContain('lost-update');
    expect(rc.valid).toBe(true);
    const si = checkHistory(history, { model: 'snapshot-isolation' });
    expect(si.valid).toBe(false);
    expect(si.forbidden).toContain('lost-update');
    // every round of every pair lost one append
    expect(rc.anomalies.filter((a) => a.type === 'lost-update')).toHaveLength(3 * 6);
  });

  it('REPEATABLE READ refuses the lost update (40001): snapshot isolation holds', async () => {
    const history = await naiveListAppend({
      pool: poolOn(url),
      isolation: 'REPEATABLE READ',
      pairs: 3,
      rounds: 6,
    });
    expect(history.transactions.some((t) => t.outcome === 'abort')).toBe(true);
    const result = checkHistory(history, { model: 'snapshot-isolation' });
    expect(result.anomalies).toEqual([]);
  });

  it('REPEATABLE READ, write skew: G2-item, allowed by snapshot isolation, not serializable', async () => {
    const history = await writeSkewRegisters({
      pool: poolOn(url),
      isolation: 'REPEATABLE READ',
      pairs: 3,
      rounds: 6,
    });
    const si = checkHistory(history, { model: 'snapshot-isolation' });
    expect(si.valid).toBe(true);
    expect(si.anomalyTypes).toEqual(['G2-item']);
    const ser = checkHistory(history, { model: 'serializable' });
    expect(ser.valid).toBe(false);
    expect(ser.anomalies[0]?.cycle?.map((s) => s.kind)).toEqual(['rw', 'rw']);
  });

  it('SERIALIZABLE through a FaultProxy that cuts every connection mid-round: nothing', async () => {
    const proxy = await FaultProxy.start({ target: url });
    try {
      const pool = poolOn(proxy.url);
      const fault = {
        round: 3,
        run: async () => {
          proxy.dropAll();
        },
      };
      const lists = await naiveListAppend({ pool, isolation: 'SERIALIZABLE', pairs: 3, rounds: 6, fault });
      const skew = await writeSkewRegisters({ pool, isolation: 'SERIALIZABLE', pairs: 3, rounds: 6, fault });
      for (const history of [lists, skew]) {
        expect(history.transactions.filter((t) => t.outcome !== 'commit').length).toBeGreaterThan(0);
        const result = checkHistory(history, { model: 'strict-serializable' });
        expect(result.anomalies).toEqual([]);
        expect(result.valid).toBe(true);
      }
    } finally {
      await proxy.close();
    }
  });

  it('SERIALIZABLE across a server restart mid-round: nothing', async () => {
    const server = await startPostgres({ provider: 'embedded' });
    try {
      const admin = new pg.Client({ connectionString: server.url });
      await admin.connect();
      await admin.query(WORKLOAD_SCHEMA);
      await admin.end();
      const pool = poolOn(server.url);
      const fault = { round: 2, run: () => server.restart() };
      const history = await writeSkewRegisters({
        pool,
        isolation: 'SERIALIZABLE',
        pairs: 2,
        rounds: 5,
        fault,
      });
      expect(history.transactions.filter((t) => t.outcome !== 'commit').length).toBeGreaterThan(0);
      const result = checkHistory(history, { model: 'strict-serializable' });
      expect(result.anomalies).toEqual([]);
      // the control on the same server: REPEATABLE READ shows the write skew after the restart too
      const control = await writeSkewRegisters({ pool, isolation: 'REPEATABLE READ', pairs: 2, rounds: 2 });
      expect(checkHistory(control, { model: 'serializable' }).forbidden).toEqual(['G2-item']);
    } finally {
      await server.stop();
    }
  }, 120_000);
});
