import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { TxManager } from '../../src/index.js';
import {
  checkHistory,
  FaultProxy,
  ListAppendRecorder,
  type ListAppendTransaction,
} from '../../src/testing/index.js';
import { meeting, naiveListAppend, WORKLOAD_SCHEMA } from '../fixtures/history-workloads.js';
import { useTestDatabase } from '../helpers.js';

// What must hold: pg-txkit's TxManager, used as the README says (tm.do at SERIALIZABLE with its
// default retries), keeps a read-modify-write workload serializable while a FaultProxy cuts every
// connection mid-round: the history it records (each attempt a transaction of its own: the retried
// ones aborted, the last committed, or of unknown outcome when COMMIT was cut) passes the checker.
// The naive control, the same workload through plain pg at READ COMMITTED, is caught.

const { url } = await useTestDatabase();
const setup = new pg.Client({ connectionString: url });
await setup.connect();
await setup.query(WORKLOAD_SCHEMA);
await setup.end();

const proxy = await FaultProxy.start({ target: url });
const pool = new pg.Pool({ connectionString: proxy.url, max: 8 });
pool.on('error', () => {}); // idle clients cut by the proxy
afterAll(async () => {
  await pool.end();
  await proxy.close();
});

describe('checkHistory on TxManager under faults', () => {
  it('tm.do at SERIALIZABLE with retries: read-modify-write of lists stays serializable through connection cuts', async () => {
    const tm = new TxManager(pool);
    const recorder = new ListAppendRecorder();
    const pairs = 3;
    const rounds = 6;
    const keys = Array.from({ length: pairs }, (_, p) => `tm-${p}`);
    await pool.query(
      "INSERT INTO lists (k) SELECT unnest($1::text[]) ON CONFLICT (k) DO UPDATE SET v = '{}'",
      [keys],
    );
    let next = 0;
    let cuts = 0;
    for (let round = 0; round < rounds; round++) {
      const meet = meeting(pairs * 2);
      await Promise.all(
        keys.flatMap((key, p) =>
          [0, 1].map(async (member) => {
            const value = ++next;
            const attempts: ListAppendTransaction[] = [];
            const result = await tm.do(
              async (tx) => {
                const t = recorder.begin(`p${p}-${member}`);
                attempts.push(t);
                // no row lock: the read of a read-modify-write, which SERIALIZABLE makes safe
                const { rows } = await tx.query<{ v: number[] }>('SELECT v FROM lists WHERE k = $1', [key]);
                const read = rows[0]?.v ?? null;
                t.read(key, read);
                await meet();
                if (round === 3 && p === 0 && member === 0 && tx.attempt === 1) {
                  cuts += proxy.dropAll();
                }
                // the row's FOR NO KEY UPDATE lock, for the write only
                await tx.query('UPDATE lists SET v = $2 WHERE k = $1', [key, [...(read ?? []), value]]);
                t.append(key, value);
              },
              { isolation: 'serializable', maxAttempts: 10, backoff: { baseMs: 1, capMs: 20 } },
            );
            // every attempt but the last rolled back; the last one ended as do() says
            for (const t of attempts.slice(0, -1)) t.abort();
            const last = attempts[attempts.length - 1];
            if (result.isOk()) last?.commit();
            else if (result.error.kind === 'CommitOutcomeUnknown') last?.unknown();
            else last?.abort();
          }),
        ),
      );
    }
    const reader = recorder.begin('reader');
    const { rows } = await pool.query<{ k: string; v: number[] }>(
      'SELECT k, v FROM lists WHERE k = ANY($1)',
      [keys],
    );
    for (const row of rows) reader.read(row.k, row.v);
    reader.commit();

    const history = recorder.history();
    expect(cuts).toBeGreaterThan(0);
    expect(history.transactions.filter((t) => t.outcome !== 'commit').length).toBeGreaterThan(0);
    const result = checkHistory(history, { model: 'strict-serializable' });
    expect(result.anomalies).toEqual([]);
    // every append that committed is in the final lists, nothing lost (one whose COMMIT was cut may be)
    const appends = (outcome: string) =>
      history.transactions
        .filter((t) => t.outcome === outcome)
        .flatMap((t) => t.ops)
        .filter((o) => o.f === 'append').length;
    const stored = rows.reduce((n, r) => n + r.v.length, 0);
    expect(stored).toBeGreaterThanOrEqual(appends('commit'));
    expect(stored).toBeLessThanOrEqual(appends('commit') + appends('unknown'));
  });

  it('the naive control: the same read-modify-write through plain pg at READ COMMITTED is caught', async () => {
    const history = await naiveListAppend({ pool, isolation: 'READ COMMITTED', pairs: 3, rounds: 3 });
    const result = checkHistory(history, { model: 'serializable' });
    expect(result.valid).toBe(false);
    expect(result.forbidden).toContain('lost-update');
  });
});
