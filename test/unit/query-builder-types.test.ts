import knex, { type Knex } from 'knex';
import { type Dialect, Kysely } from 'kysely';
import pg from 'pg';
import { describe, expectTypeOf, it } from 'vitest';
import { type KnexConfigInput, knexConfig } from '../../src/integrations/knex/index.js';
import { type KyselyDialectOptions, kyselyDialect } from '../../src/integrations/kysely/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';

// Type-level checks of the builder integrations' public signatures (nothing connects: a pool never
// connects before its first query).
const pool = new pg.Pool();
class EmailTaken extends Error {}
const tm = new TxManager(pool, { constraints: { users_email_key: () => new EmailTaken() } });

interface Database {
  accounts: { id: number; balance: number };
}

describe('pg-txkit/kysely', () => {
  it('kyselyDialect(tm) is a Kysely Dialect, for a manager with any constraints map', () => {
    expectTypeOf(kyselyDialect(tm)).toEqualTypeOf<Dialect>();
    expectTypeOf(kyselyDialect(new TxManager(pool))).toEqualTypeOf<Dialect>();
    expectTypeOf(new Kysely<Database>({ dialect: kyselyDialect(tm) })).toEqualTypeOf<Kysely<Database>>();
    expectTypeOf<KyselyDialectOptions>().toEqualTypeOf<{ propagation?: 'required' | 'nested' | undefined }>();
    // (Not called: the checks are the types.)
    // @ts-expect-error: a builder's transaction inside tm.do joins or nests; requiresNew is not offered
    void (() => kyselyDialect(tm, { propagation: 'requiresNew' }));
    // @ts-expect-error: not a manager
    void (() => kyselyDialect(pool));
  });
});

describe('pg-txkit/knex', () => {
  it('knexConfig(tm, config?) is a Knex config, without connection or pool settings of its own', () => {
    expectTypeOf(knexConfig(tm)).toEqualTypeOf<Knex.Config>();
    expectTypeOf(knex(knexConfig(tm, { propagation: 'nested', debug: false }))).toExtend<Knex>();
    expectTypeOf<Extract<keyof KnexConfigInput, 'connection' | 'pool' | 'client'>>().toEqualTypeOf<never>();
    // @ts-expect-error: the manager owns the connections
    void (() => knexConfig(tm, { connection: 'postgres://elsewhere' }));
  });
});
