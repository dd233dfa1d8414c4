import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { JobEndEvent } from '../../src/queue/index.js';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

// A queue handler's ctx.transaction runs through tm.do: it classifies only what pg raised for the
// transaction. A user's own error thrown inside it (an HTTP client's ECONNRESET) is not a database
// error: the transaction is not re-run (the external call is not repeated), and the error is the job's.
const { pool } = await useTestDatabase();
const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
const queue = new Queue({
  pool,
  txManager: tm,
  schema: 'q_tx_classify',
  tasks: { pay: z.object({ n: z.number() }) },
});
(await queue.migrate())._unsafeUnwrap();
afterAll(async () => {
  await pool.query('DROP SCHEMA q_tx_classify CASCADE');
});

describe("queue handler's ctx.transaction", () => {
  it("does not retry a user's non-driver error thrown in it", async () => {
    await pool.query('CREATE TABLE q_effects (n int)');
    (await queue.enqueue(pool, 'pay', { n: 1 }, { maxAttempts: 1 }))._unsafeUnwrap();
    const httpError = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    let externalCalls = 0;
    const seen: unknown[] = [];
    const ended = new Promise<JobEndEvent>((resolve) => {
      const worker = queue.work(
        {
          pay: async (job, ctx) => {
            const r = await ctx
              .transaction(async (tx) => {
                await tx.query('INSERT INTO q_effects VALUES ($1)', [job.payload.n]);
                externalCalls++; // the payment provider's call, failing with its own ECONNRESET
                throw httpError;
              })
              .then(
                (result) => result,
                (error: unknown) => {
                  seen.push(error);
                  throw error;
                },
              );
            if (r.isErr()) seen.push(r.error);
          },
        },
        {
          hooks: {
            onJobEnd: (event) => {
              resolve(event);
              void worker.stop();
            },
          },
        },
      );
    });
    const end = await ended;
    expect(externalCalls).toBe(1);
    expect(seen).toEqual([httpError]);
    expect(seen[0]).toBe(httpError);
    expect(end.outcome).not.toBe('completed');
    expect((await pool.query('SELECT count(*)::int AS n FROM q_effects')).rows[0]?.n).toBe(0);
  });
});
