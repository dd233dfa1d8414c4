// Client CPU per transaction of each query-builder integration against raw tm.do, and against the
// builder alone (its own pool use and BEGIN/COMMIT, no manager), on the same
// transaction: read one account by id, then add to its balance (BEGIN; SELECT; UPDATE; COMMIT), run
// by 4 concurrent loops on their own rows (no lock waits). The builders build their SQL per call, as an
// application does; the cost measured is the builder's and the integration's, above tm.do's own.
//
// CPU is this process's (process.cpuUsage, user + system: the server runs in other processes) divided
// by the transactions committed. Rounds are interleaved (raw, Kysely, Knex, raw, …) so machine noise
// hits every contender alike; each figure is the median round with its min–max.
//
// One run (2 shared cores, other developers' tests running; µs of client CPU per transaction, median
// (min–max) of 9 rounds): raw tm.do 187.9 (163.4–211.5); raw tm.do + Kysely's compile() 218.4
// (203.3–226.8); raw tm.do + Knex's toSQL().toNative() 236.2 (215.9–299.7); Kysely through
// kyselyDialect 239.6 (226.2–280.7); Knex through knexConfig 265.0 (246.6–308.3); Kysely alone 222.7
// (208.6–245.9); Knex alone 378.8 (349.8–412.9). Against raw tm.do with hand-written SQL the builders
// cost +27.5% (Kysely) and +41.0% (Knex), most of it their own query building (+16.2% and +25.7% with
// compile alone): the integrations add +9.7% (Kysely) and +12.2% (Knex) over raw tm.do running the
// same builder-compiled SQL, ~10 and ~14 µs per query. Knex through the manager costs 30% less CPU
// than Knex on its own pool.
//
// Run: npx esbuild bench/query-builders.ts --bundle --platform=node --format=esm --packages=external \
//        --outfile=dist-bench/query-builders.mjs && node dist-bench/query-builders.mjs
import knex, { type Knex } from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { knexConfig } from '../src/integrations/knex/index.js';
import { kyselyDialect } from '../src/integrations/kysely/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';
import { createTestDatabase } from '../src/testing/test-database.js';
import { TxManager } from '../src/tx/tx-manager.js';

const LOOPS = 4;
const ROUNDS = 9;
/** Transactions per loop per round. */
const PER_ROUND = 500;

interface Database {
  accounts: { id: number; balance: number };
}

type Transaction = (id: number) => Promise<unknown>;

/** The transaction's work in Kysely, on `db` or on a transaction of it. */
async function kyselyWork(db: Kysely<Database>, id: number): Promise<void> {
  const row = await db
    .selectFrom('accounts')
    .select(['id', 'balance'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  await db
    .updateTable('accounts')
    .set((eb) => ({ balance: eb('balance', '+', 1) }))
    .where('id', '=', row.id)
    .execute();
}

/** The transaction's work in Knex, on `db` or on a transaction of it. */
async function knexWork(db: Knex, id: number): Promise<void> {
  const row = await db<Database['accounts']>('accounts').select('id', 'balance').where({ id }).first();
  await db('accounts').where({ id: row?.id }).increment('balance', 1);
}

/** Client CPU (µs) per committed transaction over one round of `tx` on LOOPS loops. */
async function round(tx: Transaction): Promise<number> {
  const before = process.cpuUsage();
  await Promise.all(
    Array.from({ length: LOOPS }, async (_, i) => {
      for (let n = 0; n < PER_ROUND; n++) await tx(i + 1);
    }),
  );
  const used = process.cpuUsage(before);
  return (used.user + used.system) / (LOOPS * PER_ROUND);
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
};

const server = await startPostgres();
const database = await createTestDatabase(server.url);
const pool = new pg.Pool({ connectionString: database.url, max: LOOPS + 1 });
try {
  await pool.query(
    `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
     INSERT INTO accounts SELECT g, 0 FROM generate_series(1, ${LOOPS}) g`,
  );
  const tm = new TxManager(pool);
  const kysely = new Kysely<Database>({ dialect: kyselyDialect(tm) });
  const kx = knex(knexConfig(tm));
  // The builders at their best on their own: their own pool use and BEGIN/COMMIT, no manager (and no
  // retries, typed errors or hooks). What the builder itself costs per transaction.
  const kyselyAlone = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  const knexAlone = knex({ client: 'pg', connection: database.url, pool: { min: 0, max: LOOPS } });

  const contenders: { name: string; tx: Transaction }[] = [
    {
      name: 'raw tm.do (tx.query)',
      tx: (id) =>
        tm.doOrThrow(async (tx) => {
          const { rows } = await tx.query<{ id: number; balance: number }>(
            'SELECT id, balance FROM accounts WHERE id = $1',
            [id],
          );
          await tx.query('UPDATE accounts SET balance = balance + $1 WHERE id = $2', [1, rows[0]?.id]);
        }),
    },
    {
      // The builder's compile step alone, on raw tm.do: what the integration adds is the rest.
      name: "raw tm.do + Kysely's compile()",
      tx: (id) =>
        tm.doOrThrow(async (tx) => {
          const read = kysely.selectFrom('accounts').select(['id', 'balance']).where('id', '=', id).compile();
          const { rows } = await tx.query<Database['accounts']>(read.sql, read.parameters);
          const write = kysely
            .updateTable('accounts')
            .set((eb) => ({ balance: eb('balance', '+', 1) }))
            .where('id', '=', rows[0]?.id ?? id)
            .compile();
          await tx.query(write.sql, write.parameters);
        }),
    },
    {
      name: "raw tm.do + Knex's toSQL().toNative()",
      tx: (id) =>
        tm.doOrThrow(async (tx) => {
          const read = kx('accounts').select('id', 'balance').where({ id }).first().toSQL().toNative();
          const { rows } = await tx.query<Database['accounts']>(read.sql, read.bindings);
          const write = kx('accounts')
            .where({ id: rows[0]?.id ?? id })
            .increment('balance', 1)
            .toSQL()
            .toNative();
          await tx.query(write.sql, write.bindings);
        }),
    },
    { name: 'Kysely (kyselyDialect)', tx: (id) => tm.doOrThrow(() => kyselyWork(kysely, id)) },
    { name: 'Knex (knexConfig)', tx: (id) => tm.doOrThrow(() => knexWork(kx, id)) },
    {
      name: 'Kysely alone (PostgresDialect, db.transaction())',
      tx: (id) => kyselyAlone.transaction().execute((trx) => kyselyWork(trx, id)),
    },
    {
      name: 'Knex alone (client pg, knex.transaction())',
      tx: (id) => knexAlone.transaction((trx) => knexWork(trx, id)),
    },
  ];

  // Warm-up (JIT, plans, the pool's connections), not measured.
  for (const c of contenders) await round(c.tx);
  const samples = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const c of contenders) samples.get(c.name)?.push(await round(c.tx));
  }
  const raw = median(samples.get(contenders[0]?.name ?? '') ?? []);
  console.log(
    `client CPU per transaction (SELECT by id + UPDATE), ${LOOPS} loops × ${PER_ROUND} per round, median of ${ROUNDS} interleaved rounds (min–max)`,
  );
  for (const c of contenders) {
    const xs = samples.get(c.name) ?? [];
    const m = median(xs);
    const extra = ((m / raw - 1) * 100).toFixed(1);
    console.log(
      `${c.name.padEnd(48)} ${m.toFixed(1).padStart(7)} µs (${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)})  ${c === contenders[0] ? 'baseline' : `${extra}% vs raw tm.do`}`,
    );
  }
  await kysely.destroy();
  await kx.destroy();
  await knexAlone.destroy();
} finally {
  await pool.end();
  await database.drop();
  await server.stop();
}
