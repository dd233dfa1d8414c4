// Type-level checks of 'pg-txkit/drizzle' (compiled by `npm run typecheck`, never run).
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgTable } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { expectTypeOf } from 'vitest';
import { UniqueViolation } from '../../src/errors/index.js';
import {
  type DrizzleClientOptions,
  type DrizzleTxPool,
  drizzleClient,
} from '../../src/integrations/drizzle/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';

const pool = new pg.Pool();
const tm = new TxManager(pool, { constraints: { users_email_key: (v) => new UniqueViolation(v) } });

// The one line of setup: the client drizzle's node-postgres driver takes, as a pg.Pool.
const db = drizzle({ client: drizzleClient(tm) });
expectTypeOf(db).toExtend<NodePgDatabase>();
expectTypeOf(db.$client).toExtend<DrizzleTxPool<Record<string, unknown>>>();
expectTypeOf(drizzleClient(tm)).toExtend<pg.Pool>();

// With a schema, and each propagation a drizzle transaction() can take.
const t = pgTable('t', { id: integer('id').primaryKey() });
drizzle({ client: drizzleClient(tm, { propagation: 'nested' }), schema: { t } });
// @ts-expect-error mandatory: a builder's transaction outside tm.do is a plain transaction, never refused.
drizzleClient(new TxManager(pool), { propagation: 'mandatory' });
expectTypeOf<DrizzleClientOptions['propagation']>().toEqualTypeOf<'required' | 'nested' | undefined>();

// @ts-expect-error requiresNew would run drizzle's callback on another connection than its `db`.
drizzleClient(tm, { propagation: 'requiresNew' });
// @ts-expect-error the manager, not its pool.
drizzleClient(pool);
