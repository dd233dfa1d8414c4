// A transactional outbox and a worker with pg-txkit's Queue.
//
//   DATABASE_URL=postgres://… node --experimental-strip-types examples/queue-worker.ts   (or tsx)
//   (without DATABASE_URL an embedded PostgreSQL is started and removed)
//
// 1. An order and its "send receipt" job are written in ONE transaction: the job exists iff the order does.
// 2. A worker runs the job. Its database effect (the receipt row) is written by ctx.transaction together
//    with the job's completion, so it happens exactly once even if the worker dies and the job is retried.
//    The e-mail (an external side effect) is at-least-once: give the provider an idempotency key.
import pg from 'pg';
import { z } from 'zod';
import { Queue } from '../src/queue/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';
import { TxManager } from '../src/tx/tx-manager.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url });
const tm = new TxManager(pool);

const queue = new Queue({
  pool,
  txManager: tm,
  tasks: { receipt: z.object({ orderId: z.number().int(), email: z.string().email() }) },
});
const migrated = await queue.migrate();
if (migrated.isErr()) throw migrated.error;
await pool.query(`CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, email text NOT NULL);
                  CREATE TABLE IF NOT EXISTS receipts (order_id int PRIMARY KEY, sent_at timestamptz NOT NULL DEFAULT now())`);

// The outbox: the job commits with the order, or neither exists.
for (const email of ['ana@example.com', 'bo@example.com', 'cy@example.com']) {
  const placed = await tm.do(async (tx) => {
    const { rows } = await tx.query<{ id: number }>('INSERT INTO orders (email) VALUES ($1) RETURNING id', [
      email,
    ]);
    const orderId = rows[0]?.id ?? 0;
    // key: a second enqueue for the same order returns this job instead of a duplicate.
    return queue.enqueue(tx, 'receipt', { orderId, email }, { key: `receipt:${orderId}` });
  });
  if (placed.isErr()) throw placed.error;
  console.log(`order for ${email}: job ${placed.value.id}`);
}

let handled = 0;
const worker = queue.work(
  {
    receipt: async (job, ctx) => {
      // External call first, with the handler's abort signal (timeouts, shutdown) — at-least-once.
      console.log(
        `sending receipt for order ${job.payload.orderId} to ${job.payload.email} (attempt ${job.attempts})`,
      );
      // Database effect + completion in one transaction — exactly once.
      const r = await ctx.transaction((tx) =>
        tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [job.payload.orderId]),
      );
      if (r.isErr()) throw r.error; // LeaseLost: another worker owns the job now; the insert rolled back
      handled++;
    },
  },
  {
    concurrency: 4,
    handlerTimeout: '30s',
    hooks: { onError: (error, phase) => console.error(`worker ${phase} error`, error) },
  },
);
process.once('SIGINT', () => void worker.stop());

// Wait (bounded) for the three jobs, then stop gracefully.
for (let i = 0; i < 100 && handled < 3; i++) await new Promise((resolve) => setTimeout(resolve, 50));
await worker.stop();
const stats = await queue.stats();
console.log('stats', stats.isOk() ? stats.value : stats.error.kind);
await pool.end();
await server?.stop();
