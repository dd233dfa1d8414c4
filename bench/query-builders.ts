// Client CPU per transaction of each query-builder integration against raw `tm.do`, against raw `tm.do`
// running the builder's own compiled SQL (its query building alone), and against the builder alone (its
// own pool and BEGIN/COMMIT, no manager), on the same transaction: read one account by id, then add to
// its balance (BEGIN; SELECT; UPDATE; COMMIT), run by 4 concurrent loops on their own rows (no lock
// waits). The builders build their SQL per call, as an application does.
//
// CPU is this process's (process.cpuUsage, user + system: the server runs in other processes) divided
// by the transactions committed. Rounds are interleaved, the order rotated each round, so machine noise
// hits every contender alike; each figure is the median round with its min–max. Throughput (the
// runner's ops/s column) is the same rounds' transactions per wall-clock second.
//
// Measured (2 shared cores, other developers' tests running; µs of client CPU per transaction, medians
// of 9 rounds, two runs): raw tm.do 170.3 / 190.5; Kysely compiled 220.3 / 225.2, through kyselyDialect
// 215.7 / 249.8, alone 222.5 / 235.9; Knex compiled 231.4 / 238.0, through knexConfig 266.7 / 286.2,
// alone 371.4 / 410.0; drizzle compiled 262.3 / 284.3, through drizzleClient 297.2 / 314.3, alone
// 304.2 / 333.4; Prisma through prismaAdapter 545.6 / 591.7, alone 755.7 / 773.0. (The first version of
// this file, Kysely and Knex only, one run: raw 187.9, Kysely 239.6, Knex 265.0.) Table and reading in
// docs/query-builders.md ("Cost").
//
// Target: Kysely, drizzle and Knex ≤ 10 % client CPU above raw tm.do. Prisma is reported for
// information: its query engine (a WebAssembly query compiler and an interpreter of its plan) costs what
// it costs with or without pg-txkit.
//
// Run: `npm run bench -- --only query-builders` (the runner loads the compiled module; `run()` is its
// contract).
import { PrismaPg } from '@prisma/adapter-pg';
import { eq, sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgSchema } from 'drizzle-orm/pg-core';
import knex, { type Knex } from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { drizzleClient } from '../src/integrations/drizzle/index.js';
import { knexConfig } from '../src/integrations/knex/index.js';
import { kyselyDialect } from '../src/integrations/kysely/index.js';
import { prismaAdapter } from '../src/integrations/prisma/index.js';
import { TxManager } from '../src/tx/tx-manager.js';
import { PrismaClient } from '../test/fixtures/query-builders/prisma/generated/client.js';

/** Concurrent loops, one row each. */
const LOOPS = 4;
/** Measured rounds per contender (interleaved); the median counts. */
const ROUNDS = 9;
/** Transactions per loop per round. */
const PER_ROUND = 500;
/**
 * The benchmark's own schema: its `accounts` table is the one the suite's Prisma schema declares
 * (adapter-pg's `schema` option points Prisma's generated SQL at it).
 */
const SCHEMA = 'bench_qb';
const TABLE = `${SCHEMA}.accounts`;

interface Database {
  'bench_qb.accounts': { id: number; balance: number };
}
const accounts = pgSchema(SCHEMA).table('accounts', {
  id: integer().primaryKey(),
  balance: integer().notNull(),
});
type Drizzle = Pick<NodePgDatabase, 'select' | 'update'>;
type PrismaLike = Pick<PrismaClient, 'account'>;

type Transaction = (id: number) => Promise<unknown>;

/** One measured row of the result (the runner's shape). */
export interface QueryBuildersRow {
  readonly name: string;
  readonly opsPerSec: number;
  readonly ratio: number;
}

/** What {@link run} returns (the CLI's BenchResult shape). */
export interface QueryBuildersResult {
  readonly name: string;
  readonly baseline: string;
  readonly rows: readonly QueryBuildersRow[];
  readonly notes: string;
}

/** What {@link run} takes (the CLI's bench context). */
export interface QueryBuildersContext {
  readonly url: string;
  readonly durationMs: number;
  onProgress?(done: number, total: number): void;
  readonly signal?: AbortSignal;
}

/** The transaction's work in Kysely, on `db` or on a transaction of it. */
async function kyselyWork(db: Kysely<Database>, id: number): Promise<void> {
  const row = await db
    .selectFrom('bench_qb.accounts')
    .select(['id', 'balance'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  await db
    .updateTable('bench_qb.accounts')
    .set((eb) => ({ balance: eb('balance', '+', 1) }))
    .where('id', '=', row.id)
    .execute();
}

/** The transaction's work in Knex, on `db` or on a transaction of it. */
async function knexWork(db: Knex, id: number): Promise<void> {
  const row = await db<Database['bench_qb.accounts']>(TABLE).select('id', 'balance').where({ id }).first();
  await db(TABLE).where({ id: row?.id }).increment('balance', 1);
}

/** The transaction's work in drizzle, on `db` or on a transaction of it. */
async function drizzleWork(db: Drizzle, id: number): Promise<void> {
  const [row] = await db
    .select({ id: accounts.id, balance: accounts.balance })
    .from(accounts)
    .where(eq(accounts.id, id));
  await db
    .update(accounts)
    .set({ balance: sql`${accounts.balance} + 1` })
    .where(eq(accounts.id, row?.id ?? id));
}

/** The transaction's work in Prisma, on the client or on its interactive transaction's client. */
async function prismaWork(db: PrismaLike, id: number): Promise<void> {
  const row = await db.account.findFirst({ where: { id }, select: { id: true, balance: true } });
  await db.account.update({ where: { id: row?.id ?? id }, data: { balance: { increment: 1 } } });
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
};

/**
 * Measures each builder integration's client CPU per transaction against raw `tm.do`.
 *
 * @example
 * const result = await run({ url: 'postgres://postgres@127.0.0.1:5432/bench', durationMs: 3000 });
 * console.log(result.notes);
 */
export async function run(context: QueryBuildersContext): Promise<QueryBuildersResult> {
  const signal = context.signal ?? new AbortController().signal;
  const onProgress = context.onProgress ?? (() => {});
  const pool = new pg.Pool({ connectionString: context.url, max: LOOPS + 1 });
  pool.on('error', () => {});
  // The builders alone use a pool of their own, as an application without pg-txkit would.
  const ownPool = new pg.Pool({ connectionString: context.url, max: LOOPS + 1 });
  ownPool.on('error', () => {});
  const tm = new TxManager(pool);
  const kysely = new Kysely<Database>({ dialect: kyselyDialect(tm) });
  const kx = knex(knexConfig(tm));
  const dz = drizzle({ client: drizzleClient(tm) });
  const prisma = new PrismaClient({ adapter: prismaAdapter(tm, { pg: { schema: SCHEMA } }) });
  const kyselyAlone = new Kysely<Database>({ dialect: new PostgresDialect({ pool: ownPool }) });
  const knexAlone = knex({ client: 'pg', connection: context.url, pool: { min: 0, max: LOOPS } });
  const drizzleAlone = drizzle({ client: ownPool });
  const prismaAlone = new PrismaClient({ adapter: new PrismaPg(ownPool, { schema: SCHEMA }) });

  const contenders: { name: string; tx: Transaction }[] = [
    {
      name: 'raw tm.do (tx.query)',
      tx: (id) =>
        tm.doOrThrow(async (tx) => {
          const { rows } = await tx.query<{ id: number }>(`SELECT id, balance FROM ${TABLE} WHERE id = $1`, [
            id,
          ]);
          await tx.query(`UPDATE ${TABLE} SET balance = balance + $1 WHERE id = $2`, [1, rows[0]?.id]);
        }),
    },
    {
      // A builder's compile step alone, on raw tm.do: what its integration adds is the rest.
      name: "raw tm.do + Kysely's compile()",
      tx: (id) =>
        tm.doOrThrow(async (tx) => {
          const read = kysely
            .selectFrom('bench_qb.accounts')
            .select(['id', 'balance'])
            .where('id', '=', id)
            .compile();
          const { rows } = await tx.query<{ id: number }>(read.sql, read.parameters);
          const write = kysely
            .updateTable('bench_qb.accounts')
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
          const read = kx(TABLE).select('id', 'balance').where({ id }).first().toSQL().toNative();
          const { rows } = await tx.query<{ id: number }>(read.sql, read.bindings);
          const write = kx(TABLE)
            .where({ id: rows[0]?.id ?? id })
            .increment('balance', 1)
            .toSQL()
            .toNative();
          await tx.query(write.sql, write.bindings);
        }),
    },
    {
      name: "raw tm.do + drizzle's toSQL()",
      tx: (id) =>
        tm.doOrThrow(async (tx) => {
          const read = dz
            .select({ id: accounts.id, balance: accounts.balance })
            .from(accounts)
            .where(eq(accounts.id, id))
            .toSQL();
          const { rows } = await tx.query<{ id: number }>(read.sql, read.params);
          const write = dz
            .update(accounts)
            .set({ balance: sql`${accounts.balance} + 1` })
            .where(eq(accounts.id, rows[0]?.id ?? id))
            .toSQL();
          await tx.query(write.sql, write.params);
        }),
    },
    { name: 'Kysely (kyselyDialect)', tx: (id) => tm.doOrThrow(() => kyselyWork(kysely, id)) },
    { name: 'Knex (knexConfig)', tx: (id) => tm.doOrThrow(() => knexWork(kx, id)) },
    { name: 'drizzle (drizzleClient)', tx: (id) => tm.doOrThrow(() => drizzleWork(dz, id)) },
    { name: 'Prisma (prismaAdapter)', tx: (id) => tm.doOrThrow(() => prismaWork(prisma, id)) },
    {
      name: 'Kysely alone (PostgresDialect, db.transaction())',
      tx: (id) => kyselyAlone.transaction().execute((trx) => kyselyWork(trx, id)),
    },
    {
      name: 'Knex alone (client pg, knex.transaction())',
      tx: (id) => knexAlone.transaction((trx) => knexWork(trx, id)),
    },
    {
      name: 'drizzle alone (pg.Pool, db.transaction())',
      tx: (id) => drizzleAlone.transaction((trx) => drizzleWork(trx, id)),
    },
    {
      name: 'Prisma alone (@prisma/adapter-pg, $transaction)',
      tx: (id) => prismaAlone.$transaction((p) => prismaWork(p, id)),
    },
  ];
  const baseline = contenders[0]?.name ?? '';
  const cpu = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
  const rates = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
  /** One round of `tx` on LOOPS loops: client CPU µs per transaction, transactions per second. */
  const round = async (tx: Transaction): Promise<{ cpu: number; rate: number }> => {
    const before = process.cpuUsage();
    const started = performance.now();
    await Promise.all(
      Array.from({ length: LOOPS }, async (_, i) => {
        for (let n = 0; n < PER_ROUND && !signal.aborted; n++) await tx(i + 1);
      }),
    );
    const used = process.cpuUsage(before);
    const seconds = (performance.now() - started) / 1000;
    return { cpu: (used.user + used.system) / (LOOPS * PER_ROUND), rate: (LOOPS * PER_ROUND) / seconds };
  };
  try {
    await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
    await pool.query(`CREATE SCHEMA ${SCHEMA}`);
    await pool.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, balance int NOT NULL)`);
    await pool.query(`INSERT INTO ${TABLE} SELECT g, 0 FROM generate_series(1, ${LOOPS}) g`);
    // Warm-up (JIT, plans, the pools' connections, Prisma's engine), not measured.
    for (const c of contenders) await round(c.tx);
    const total = ROUNDS * contenders.length;
    let done = 0;
    for (let r = 0; r < ROUNDS && !signal.aborted; r++) {
      for (let k = 0; k < contenders.length && !signal.aborted; k++) {
        const c = contenders[(k + r) % contenders.length];
        if (!c) continue;
        const measured = await round(c.tx);
        cpu.get(c.name)?.push(measured.cpu);
        rates.get(c.name)?.push(measured.rate);
        onProgress(++done, total);
      }
    }
    const cpuOf = (name: string) => median(cpu.get(name) ?? []);
    const raw = cpuOf(baseline);
    const vs = (name: string, of: number) => `${((cpuOf(name) / of - 1) * 100).toFixed(1)}%`;
    const figure = (name: string) => {
      const xs = cpu.get(name) ?? [];
      return `${name} ${cpuOf(name).toFixed(1)} (${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)})`;
    };
    const notes = [
      `client CPU µs per transaction (SELECT by id + UPDATE), ${LOOPS} loops × ${PER_ROUND} per round, median (min–max) of ${ROUNDS} interleaved rounds: ${contenders.map((c) => figure(c.name)).join(', ')}`,
      `vs raw tm.do: ${contenders
        .slice(1)
        .map((c) => `${c.name} ${vs(c.name, raw)}`)
        .join(', ')}`,
      `what each integration adds over raw tm.do running the builder's own compiled SQL: Kysely ${vs('Kysely (kyselyDialect)', cpuOf("raw tm.do + Kysely's compile()"))}, Knex ${vs('Knex (knexConfig)', cpuOf("raw tm.do + Knex's toSQL().toNative()"))}, drizzle ${vs('drizzle (drizzleClient)', cpuOf("raw tm.do + drizzle's toSQL()"))}`,
      `through pg-txkit vs the builder alone: Kysely ${vs('Kysely (kyselyDialect)', cpuOf('Kysely alone (PostgresDialect, db.transaction())'))}, Knex ${vs('Knex (knexConfig)', cpuOf('Knex alone (client pg, knex.transaction())'))}, drizzle ${vs('drizzle (drizzleClient)', cpuOf('drizzle alone (pg.Pool, db.transaction())'))}, Prisma ${vs('Prisma (prismaAdapter)', cpuOf('Prisma alone (@prisma/adapter-pg, $transaction)'))}`,
    ];
    const rows = contenders.map((c) => ({
      name: c.name,
      opsPerSec: Math.round(median(rates.get(c.name) ?? [])),
    }));
    const base = rows[0]?.opsPerSec || 1;
    return {
      name: 'query-builders',
      baseline,
      rows: rows.map((r) => ({ ...r, ratio: Math.round((r.opsPerSec / base) * 100) / 100 })),
      notes: notes.join('; '),
    };
  } finally {
    await prisma.$disconnect().catch(() => {});
    await prismaAlone.$disconnect().catch(() => {});
    await kysely.destroy().catch(() => {});
    await kx.destroy().catch(() => {});
    await knexAlone.destroy().catch(() => {});
    await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`).catch(() => {});
    await pool.end();
    await ownPool.end().catch(() => {});
  }
}
