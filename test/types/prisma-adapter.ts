// Type-level checks of 'pg-txkit/prisma' (compiled by `npm run typecheck`, never run).
import type { SqlDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import pg from 'pg';
import { expectTypeOf } from 'vitest';
import { UniqueViolation } from '../../src/errors/index.js';
import { type PrismaAdapterOptions, prismaAdapter } from '../../src/integrations/prisma/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { PrismaClient } from '../fixtures/query-builders/prisma/generated/client.js';

const pool = new pg.Pool();
const tm = new TxManager(pool, { constraints: { users_email_key: (v) => new UniqueViolation(v) } });

// The one line of setup: the adapter Prisma 7's client takes.
const prisma = new PrismaClient({ adapter: prismaAdapter(tm) });
void prisma;
expectTypeOf(prismaAdapter(tm)).toEqualTypeOf<SqlDriverAdapterFactory>();

// Each propagation a $transaction can take, and adapter-pg's own options.
prismaAdapter(new TxManager(pool), { propagation: 'nested', pg: { schema: 'app' } });
expectTypeOf<PrismaAdapterOptions['propagation']>().toEqualTypeOf<'required' | 'nested' | undefined>();

// @ts-expect-error requiresNew would run Prisma's callback on another connection than its client.
prismaAdapter(tm, { propagation: 'requiresNew' });
// @ts-expect-error the manager, not its pool.
prismaAdapter(pool);
