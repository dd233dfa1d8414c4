import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UniqueViolation } from '../../src/errors/index.js';
import { prismaAdapter } from '../../src/integrations/prisma/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
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
      // Nothing at all was sent: the callback sent no statement, so neither BEGIN nor COMMIT went out.
      expect(log.texts).toEqual([]);
    } finally {
      await end();
    }
  });
});

describe("Prisma's batch $transaction([…])", () => {
  it('inside tm.do joins the transaction: no BEGIN/COMMIT of its own, rolled back with it', async () => {
    const { tm, log, prisma, end } = recorded();
    try {
      const outcome = await tm
        .do(async () => {
          await prisma.$transaction([
            prisma.item.create({ data: { id: 1, label: 'a' } }),
            prisma.item.create({ data: { id: 2, label: 'b' } }),
          ]);
          throw new Error('roll back');
        })
        .then(
          () => 'committed',
          (e: unknown) => (e as Error).message,
        );
      expect(outcome).toBe('roll back');
      expect(await ids()).toEqual([]);
      expect(control(log.texts)).toEqual(['begin isolation level read committed', 'rollback']);
    } finally {
      await end();
    }
  });

  it('outside tm.do is one transaction of the manager: a failing statement leaves nothing behind', async () => {
    const { log, prisma, end } = recorded();
    try {
      const failed = await prisma
        .$transaction([
          prisma.item.create({ data: { id: 1, label: 'a' } }),
          prisma.item.create({ data: { id: 1, label: 'duplicate' } }),
        ])
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(failed).toBeInstanceOf(Error);
      expect(await ids()).toEqual([]);
      expect(control(log.texts)).toEqual(['begin isolation level read committed', 'rollback']);
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
});

describe('a tm.do callback that returns a Prisma query without awaiting it', () => {
  it('runs it in the transaction (Prisma queries are lazy thenables)', async () => {
    const { tm, prisma, end } = recorded();
    try {
      const result = await tm.do(() => prisma.item.create({ data: { id: 1, label: 'a' } }), {
        readOnly: true,
      });
      // Refused by the read-only transaction: it ran there, not on the pool.
      expect(result.isErr() && result.error.kind).toBe('ReadOnlyTransaction');
      expect(await ids()).toEqual([]);
    } finally {
      await end();
    }
  });
});

describe("Prisma's same-tick findUnique batching (docs/query-builders.md)", () => {
  /** Two transactions that each insert their own row, then read at the same tick of the event loop. */
  async function sameTick(read: (prisma: PrismaClient, id: number) => Promise<unknown>): Promise<unknown[]> {
    const { tm, prisma, end } = recorded();
    try {
      let arrived = 0;
      let open!: () => void;
      const together = new Promise<void>((resolve) => {
        open = resolve;
      });
      const run = (id: number) =>
        tm.doOrThrow(async () => {
          await prisma.item.create({ data: { id, label: `own ${id}` } });
          if (++arrived === 2) open();
          await together; // both continue in the same microtask checkpoint: the same tick
          return read(prisma, id);
        });
      return await Promise.all([run(1), run(2)]);
    } finally {
      await end();
    }
  }

  it('the documented way: findFirst (never batched) reads each transaction its own uncommitted row', async () => {
    const rows = await sameTick((prisma, id) => prisma.item.findFirst({ where: { id } }));
    expect(rows).toEqual([
      { id: 1, label: 'own 1' },
      { id: 2, label: 'own 2' },
    ]);
  });

  it('the documented way: findUnique inside $transaction (batched per transaction) does too', async () => {
    const rows = await sameTick((prisma, id) =>
      prisma.$transaction((p) => p.item.findUnique({ where: { id } })),
    );
    expect(rows).toEqual([
      { id: 1, label: 'own 1' },
      { id: 2, label: 'own 2' },
    ]);
  });

  it('control: a bare findUnique in both is batched into ONE query, run in one transaction (the limit)', async () => {
    const rows = await sameTick((prisma, id) => prisma.item.findUnique({ where: { id } }));
    // The batch ran in the transaction that asked first: the other's own row is not seen (it read in the
    // first one's snapshot). Which one asked first is up to the event loop.
    expect(rows.filter((row) => row === null)).toHaveLength(1);
    expect(rows.filter((row) => row !== null)).toHaveLength(1);
  });
});
