// Transaction-scoped advisory locks: per-tenant period close, and a transfer that needs two keys.
//
//   DATABASE_URL=postgres://… node --experimental-strip-types examples/advisory-lock-tenant-close.ts   (or tsx)
//   (without DATABASE_URL an embedded PostgreSQL is started and removed)
//
// - Keys come from advisoryKey(namespace, id): sha-256, stable in every process and version; the tenant
//   is part of the id, so tenants never block each other.
// - withAdvisoryLock runs inside a TxManager transaction; the lock is released by COMMIT/ROLLBACK (and by
//   the server if the connection dies) — it can never stay behind on a pooled connection.
// - wait: 'try' → LockBusy (someone else is closing that period; skip); several keys are taken sorted,
//   in one statement, so opposite orders cannot deadlock.
// - A lock is not idempotency: the close is recorded with a unique constraint too (ON CONFLICT DO NOTHING).
import pg from 'pg';
import { advisoryKey, withAdvisoryLock } from '../src/advisory/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';
import { TxManager } from '../src/tx/tx-manager.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 10 });
const tm = new TxManager(pool);
await pool.query(`CREATE TABLE IF NOT EXISTS closes (tenant text, period text, PRIMARY KEY (tenant, period));
                  CREATE TABLE IF NOT EXISTS wallets (id text PRIMARY KEY, balance int NOT NULL);
                  INSERT INTO wallets VALUES ('w1', 100), ('w2', 100) ON CONFLICT DO NOTHING`);

function closePeriod(tenant: string, period: string) {
  const key = advisoryKey('invoice-close', `${tenant}:${period}`);
  return withAdvisoryLock(
    tm,
    key,
    async (tx) => {
      // Row lock on the new (tenant, period) key only: the record that makes the close happen once.
      const { rowCount } = await tx.query('INSERT INTO closes VALUES ($1, $2) ON CONFLICT DO NOTHING', [
        tenant,
        period,
      ]);
      return rowCount === 1 ? 'closed' : 'already closed';
    },
    { wait: 'try' },
  );
}

const results = await Promise.all(
  ['acme', 'acme', 'acme', 'globex'].map(async (tenant) => {
    const r = await closePeriod(tenant, '2026-11');
    return `${tenant}: ${r.isOk() ? r.value : r.error.kind}`;
  }),
);
console.log(results.join('\n'));

/** Moves money between two wallets under both wallets' advisory keys (any order: no deadlock). */
function transfer(from: string, to: string, amount: number) {
  const keys = [advisoryKey('wallet', from), advisoryKey('wallet', to)];
  return withAdvisoryLock(
    tm,
    keys,
    async (tx) => {
      // Row locks (FOR NO KEY UPDATE via UPDATE) on both wallets; the advisory keys already serialize them.
      await tx.query('UPDATE wallets SET balance = balance - $2 WHERE id = $1', [from, amount]);
      await tx.query('UPDATE wallets SET balance = balance + $2 WHERE id = $1', [to, amount]);
    },
    { lockTimeout: '2s' },
  );
}
const transfers = await Promise.all(
  Array.from({ length: 20 }, (_, i) => (i % 2 ? transfer('w1', 'w2', 1) : transfer('w2', 'w1', 1))),
);
console.log(
  `transfers: ${transfers.filter((t) => t.isOk()).length} ok, ${transfers.filter((t) => t.isErr()).length} failed`,
);
console.log((await pool.query('SELECT id, balance FROM wallets ORDER BY id')).rows);
await pool.end();
await server?.stop();
