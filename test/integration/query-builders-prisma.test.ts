import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NotInTransaction, UniqueViolation } from '../../src/errors/index.js';
import { prismaAdapter } from '../../src/integrations/prisma/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { TxUsageError } from '../../src/tx/tx-usage-error.js';
import { PrismaClient } from '../fixtures/query-builders/prisma/generated/client.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool, expectClean } from './tx-support.js';

// Prisma's own $transaction through prismaAdapter(tm): what it joins, what reaches the server.
const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query('CREATE TABLE items (id int PRIMARY KEY, label text NOT NULL)');
});

afterEach(async () => {
  await pool.query('TRUNCATE items');
  await expectClean(pool, url);
});

/** A manager over a pool that records every statement its clients send, and a Prisma client on it. */
function recorded(options: Parameters<typeof prismaAdapter>[1] = {}) {
  const { pool: counting, log } = countingPool(url);
  const tm = new TxManager(counting);
  const prisma = new PrismaClient({ adapter: prismaAdapter(tm, options) });
  return {
    tm,
    log,
    prisma,
    end: async () => {
      await prisma.$disconnect();
      await counting.end();
    },
  };
}

const ids = async () =>
  (await pool.query<{ id: number }>('SELECT id FROM items ORDER BY id')).rows.map((r) => r.id);

/** Statements that start or end a transaction or touch a savepoint, as sent (lower-cased). */
const control = (texts: readonly string[]) =>
  texts
    .map((t) => t.trim().toLowerCase())
    .filter((t) => /^(begin|commit|rollback|savepoint|release|start|end|abort)\b/.test(t));

describe('Prisma $transaction inside tm.do', () => {
  it("'required' (default): joins the transaction; Prisma's BEGIN/COMMIT never reach the server", async () => {
    const { tm, log, prisma, end } = recorded();
    try {
      const outcome = tm.do(async () => {
        await prisma.item.create({ data: { id: 1, label: 'outer' } });
        await prisma.$transaction(async (p) => {
          await p.item.create({ data: { id: 2, label: 'inner' } });
        });
        expect(await ids()).toEqual([]);
        throw new Error('outer fails after Prisma committed its part');
      });
      await expect(outcome).rejects.toThrow('outer fails');
      expect(await ids()).toEqual([]);
      expect(control(log.texts)).toEqual(['begin isolation level read committed', 'rollback']);
    } finally {
      await end();
    }
  });

  it("'nested': a SAVEPOINT; a thrown callback rolls back only its own writes", async () => {
    const { tm, log, prisma, end } = recorded({ propagation: 'nested' });
    try {
      await tm.doOrThrow(async () => {
        await prisma.item.create({ data: { id: 1, label: 'outer' } });
        await expect(
          prisma.$transaction(async (p) => {
            await p.item.create({ data: { id: 2, label: 'undone' } });
            throw new Error('inner fails');
          }),
        ).rejects.toThrow('inner fails');
        await prisma.$transaction(async (p) => {
          await p.item.create({ data: { id: 3, label: 'kept' } });
        });
      });
      expect(await ids()).toEqual([1, 3]);
      const sent = control(log.texts);
      expect(sent.filter((t) => t === 'begin' || t === 'commit' || t === 'rollback')).toEqual(['commit']);
      expect(sent.filter((t) => t.startsWith('savepoint'))).toHaveLength(2);
    } finally {
      await end();
    }
  });

  it("'nested': the outer client is refused while Prisma's savepoint is open", async () => {
    const { tm, prisma, end } = recorded({ propagation: 'nested' });
    try {
      const outcome = tm.do(async () => {
        await prisma.$transaction(async () => {
          await prisma.item.create({ data: { id: 1, label: 'through the outer scope' } });
        });
      });
      await expect(outcome).rejects.toBeInstanceOf(TxUsageError);
      expect(await ids()).toEqual([]);
    } finally {
      await end();
    }
  });

  it("Prisma's own nested $transaction is a savepoint of the same transaction", async () => {
    const { tm, prisma, end } = recorded();
    try {
      await tm.doOrThrow(async () => {
        await prisma.$transaction(async (p) => {
          await p.item.create({ data: { id: 1, label: 'a' } });
          // biome-ignore lint/suspicious/noExplicitAny: Prisma types a transaction client without $transaction.
          const nestable = p as any;
          await expect(
            nestable.$transaction(async (inner: typeof p) => {
              await inner.item.create({ data: { id: 2, label: 'b' } });
              throw new Error('undo b');
            }),
          ).rejects.toThrow('undo b');
        });
      });
      expect(await ids()).toEqual([1]);
    } finally {
      await end();
    }
  });

  it('a unique violation inside $transaction comes back from tm.do as UniqueViolation', async () => {
    const { tm, prisma, end } = recorded();
    try {
      const result = await tm.do(async () => {
        await prisma.$transaction(async (p) => {
          await p.item.create({ data: { id: 1, label: 'a' } });
          await p.item.create({ data: { id: 1, label: 'again' } });
        });
      });
      expect(result._unsafeUnwrapErr()).toBeInstanceOf(UniqueViolation);
      expect(await ids()).toEqual([]);
    } finally {
      await end();
    }
  });

  it('a stronger isolation than the joined transaction is refused before anything is sent', async () => {
    const { tm, log, prisma, end } = recorded();
    try {
      await tm.doOrThrow(async () => {
        const refused = await prisma
          .$transaction(async (p) => p.item.create({ data: { id: 1, label: 'a' } }), {
            isolationLevel: 'Serializable',
          })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(refused).toBeInstanceOf(Error);
        expect(String((refused as Error).message)).toContain('isolation');
      });
      expect(log.texts.map((t) => t.toLowerCase())).toEqual([
        'begin isolation level read committed',
        'commit',
      ]);
    } finally {
      await end();
    }
  });
});

describe('Prisma $transaction outside tm.do', () => {
  it('runs as one attempt of a transaction of the manager, with Prisma isolation and the manager defaults', async () => {
    const { pool: counting, log } = countingPool(url);
    const tm = new TxManager(counting, { defaults: { lockTimeout: '1500ms' } });
    const prisma = new PrismaClient({ adapter: prismaAdapter(tm) });
    try {
      const seen = await prisma.$transaction(
        async (p) => {
          await p.item.create({ data: { id: 1, label: 'a' } });
          return p.$queryRaw<{ iso: string; lt: string }[]>`
            SELECT current_setting('transaction_isolation') AS iso, current_setting('lock_timeout') AS lt`;
        },
        { isolationLevel: 'RepeatableRead' },
      );
      expect(seen).toEqual([{ iso: 'repeatable read', lt: '1500ms' }]);
      expect(await ids()).toEqual([1]);
      expect(control(log.texts)).toEqual([
        'begin isolation level repeatable read; set local lock_timeout = 1500',
        'commit',
      ]);
    } finally {
      await prisma.$disconnect();
      await counting.end();
    }
  });

  it('a thrown callback rolls back and rejects with its error', async () => {
    const { prisma, end } = recorded();
    try {
      await expect(
        prisma.$transaction(async (p) => {
          await p.item.create({ data: { id: 1, label: 'a' } });
          throw new Error('no');
        }),
      ).rejects.toThrow('no');
      expect(await ids()).toEqual([]);
    } finally {
      await end();
    }
  });

  it("'mandatory': refused with NotInTransaction before anything is sent", async () => {
    const { log, prisma, end } = recorded({ propagation: 'mandatory' });
    try {
      const error = await prisma
        .$transaction(async (p) => p.item.create({ data: { id: 1, label: 'a' } }))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(NotInTransaction);
      expect(log.texts).toEqual([]);
    } finally {
      await end();
    }
  });
});

describe('prismaAdapter outside any transaction', () => {
  it('queries run on the pool', async () => {
    const { prisma, end } = recorded();
    try {
      await prisma.item.create({ data: { id: 5, label: 'x' } });
      expect(await prisma.item.findUnique({ where: { id: 5 } })).toEqual({ id: 5, label: 'x' });
    } finally {
      await end();
    }
  });
});
