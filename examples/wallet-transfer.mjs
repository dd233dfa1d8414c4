// Wallet transfers with lockRows: read, decide in code, write — on rows locked in key order.
//
//   npm run build && node examples/wallet-transfer.mjs
//   (DATABASE_URL=postgres://… to use your server; tables ex_wallets* are dropped and recreated)
//
// Proves: 40 concurrent transfers in BOTH directions between two wallets never deadlock and never
// lose money with lockRows (one statement, FOR NO KEY UPDATE, ids sorted); the naive version (read the
// balances, write the computed values) loses updates.
import pg from 'pg';
import { lockRows, TxManager } from '../dist/index.js';
import { startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 24 });
const tm = new TxManager(pool);
try {
  await pool.query(`DROP TABLE IF EXISTS ex_wallets, ex_wallets_naive;
    CREATE TABLE ex_wallets (id int PRIMARY KEY, balance int NOT NULL CHECK (balance >= 0));
    CREATE TABLE ex_wallets_naive (id int PRIMARY KEY, balance int NOT NULL);
    INSERT INTO ex_wallets VALUES (1, 1000), (2, 1000);
    INSERT INTO ex_wallets_naive VALUES (1, 1000), (2, 1000);`);

  /** Moves `amount` from one wallet to another; an Err when the money is not there. */
  const transfer = (from, to, amount) =>
    tm.do(async (tx) => {
      const locked = await lockRows(tx, { table: 'ex_wallets', ids: [from, to] }); // key order: no deadlock
      if (locked.isErr()) throw locked.error; // a database failure: tm.do retries or reports it
      const source = locked.value.rows.find((w) => w.id === from);
      if (source.balance < amount) return { ok: false, reason: 'insufficient funds' };
      await tx.query('UPDATE ex_wallets SET balance = balance - $2 WHERE id = $1', [from, amount]);
      await tx.query('UPDATE ex_wallets SET balance = balance + $2 WHERE id = $1', [to, amount]);
      return { ok: true };
    });

  const naiveTransfer = async (from, to, amount) => {
    const { rows } = await pool.query('SELECT id, balance FROM ex_wallets_naive WHERE id = ANY($1)', [
      [from, to],
    ]);
    const balance = (id) => rows.find((w) => w.id === id).balance;
    await new Promise((resolve) => setTimeout(resolve, 2)); // the app "thinks"; others write meanwhile
    if (balance(from) < amount) return;
    await pool.query('UPDATE ex_wallets_naive SET balance = $2 WHERE id = $1', [
      from,
      balance(from) - amount,
    ]);
    await pool.query('UPDATE ex_wallets_naive SET balance = $2 WHERE id = $1', [to, balance(to) + amount]);
  };

  const directions = Array.from({ length: 40 }, (_, i) => (i % 2 ? [1, 2] : [2, 1]));
  const results = await Promise.all(directions.map(([from, to]) => transfer(from, to, 10)));
  await Promise.all(directions.map(([from, to]) => naiveTransfer(from, to, 10)));

  const total = async (t) => (await pool.query(`SELECT sum(balance)::int AS s FROM ${t}`)).rows[0].s;
  const failed = results.filter((r) => r.isErr()).map((r) => r.error.kind);
  console.log(`lockRows: 40 opposite-direction transfers, ${failed.length} failed ${JSON.stringify(failed)}`);
  console.log(`  total money: ${await total('ex_wallets')} (expected 2000)`);
  console.log(
    `naive read-compute-write: total money ${await total('ex_wallets_naive')} (≠ 2000 means lost updates)`,
  );
  await pool.query('DROP TABLE ex_wallets, ex_wallets_naive');
} finally {
  await pool.end();
  await server?.stop();
}
