// Idempotent payment requests with IdempotencyKeys: the key row commits with the payment, or neither.
//
//   npm run build && node examples/idempotent-payment.mjs
//
// Proves: a client that retries one request 10 times at once is charged once and every retry gets the
// same answer (replayed); a reused key with another body is refused (IdempotencyConflict); a failed
// attempt leaves no key behind, so the retry runs. The naive "SELECT key, then pay" charges twice.
import { createHash } from 'node:crypto';
import { err } from 'neverthrow';
import pg from 'pg';
import { ConditionFailed, IdempotencyKeys, TxManager } from '../dist/index.js';
import { startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 24 });
const tm = new TxManager(pool);
const sha256 = (body) => createHash('sha256').update(JSON.stringify(body)).digest('hex');
try {
  await pool.query(`DROP TABLE IF EXISTS ex_payments, ex_payment_keys, ex_naive_keys;
    CREATE TABLE ex_payments (id serial PRIMARY KEY, request text NOT NULL, amount int NOT NULL);
    CREATE TABLE ex_naive_keys (key text NOT NULL, payment_id int NOT NULL);`);
  const keys = new IdempotencyKeys(tm, { table: 'ex_payment_keys', ttl: '24h' });
  const table = await keys.migrate();
  if (table.isErr()) throw table.error;

  const charge = (key, body) =>
    keys.run(
      key,
      async (tx) => {
        const { rows } = await tx.query(
          'INSERT INTO ex_payments (request, amount) VALUES ($1, $2) RETURNING id',
          [key, body.amount],
        );
        return { paymentId: rows[0].id, amount: body.amount };
      },
      { fingerprint: sha256(body) },
    );

  const body = { amount: 100, currency: 'EUR' };
  const retries = await Promise.all(Array.from({ length: 10 }, () => charge('req-1', body)));
  const answers = retries.map((r) => {
    if (r.isErr()) throw r.error;
    return r.value;
  });
  console.log(
    `10 concurrent retries of req-1: ${answers.filter((a) => !a.replayed).length} charge, ${answers.filter((a) => a.replayed).length} replays, payment ids seen ${JSON.stringify([...new Set(answers.map((a) => a.result.paymentId))])}`,
  );
  const conflict = await charge('req-1', { amount: 999, currency: 'EUR' });
  console.log(`req-1 reused with another body: ${conflict.isErr() ? conflict.error.kind : 'charged!'}`);

  const failed = await keys.run('req-2', async (tx) => {
    await tx.query("INSERT INTO ex_payments (request, amount) VALUES ('req-2', 5)");
    return err(new ConditionFailed()); // e.g. the card was declined: everything rolls back
  });
  const retried = await charge('req-2', { amount: 5 });
  console.log(
    `req-2 failed first (${failed.isErr() ? failed.error.kind : 'no error?'}), then ran on retry: replayed=${retried.isOk() ? retried.value.replayed : retried.error.kind}`,
  );

  await Promise.all(
    Array.from({ length: 10 }, async () => {
      const seen = await pool.query("SELECT payment_id FROM ex_naive_keys WHERE key = 'naive-1'");
      await new Promise((resolve) => setTimeout(resolve, 2));
      if (seen.rowCount) return;
      const { rows } = await pool.query(
        "INSERT INTO ex_payments (request, amount) VALUES ('naive-1', 100) RETURNING id",
      );
      await pool.query("INSERT INTO ex_naive_keys VALUES ('naive-1', $1)", [rows[0].id]);
    }),
  );
  const counts = await pool.query(
    'SELECT request, count(*)::int AS n FROM ex_payments GROUP BY request ORDER BY request',
  );
  console.log(
    `payments per request: ${JSON.stringify(Object.fromEntries(counts.rows.map((r) => [r.request, r.n])))} (naive-1 > 1: charged twice)`,
  );
  await pool.query('DROP TABLE ex_payments, ex_payment_keys, ex_naive_keys');
} finally {
  await pool.end();
  await server?.stop();
}
