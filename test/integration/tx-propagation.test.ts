import { err } from 'neverthrow';
import pg from 'pg';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConditionFailed } from '../../src/errors/index.js';
import { gate } from '../../src/testing/gate.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Queryable } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import { expectClean } from './tx-support.js';

const { pool, url } = await useTestDatabase();

beforeAll(async () => {
  await pool.query('CREATE TABLE log (name text PRIMARY KEY)');
});

beforeEach(async () => {
  await pool.query('TRUNCATE log');
});

afterEach(async () => {
  await expectClean(pool, url);
});

const add = (db: Queryable, name: string) => db.query('INSERT INTO log (name) VALUES ($1)', [name]);
const names = async () =>
  (await pool.query<{ name: string }>('SELECT name FROM log ORDER BY name')).rows.map((r) => r.name);
const pid = async (db: Queryable) =>
  (await db.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p;

describe('propagation', () => {
  it('required joins the active transaction: same connection, same Tx, commits together', async () => {
    const tm = new TxManager(pool);
    await tm.doOrThrow(async (outer) => {
      await add(outer, 'outer');
      await tm.doOrThrow(async (inner) => {
        expect(inner).toBe(outer);
        expect(await pid(inner)).toBe(await pid(outer));
        await add(inner, 'inner');
      });
    });
    expect(await names()).toEqual(['inner', 'outer']);
  });

  it('nested: a rolled-back savepoint keeps the outer work; a released one keeps its own', async () => {
    const tm = new TxManager(pool);
    const afterCommit: string[] = [];
    const afterRollback: string[] = [];
    const outcome = await tm.doOrThrow(async (tx) => {
      await add(tx, 'a-outer');
      const domain = await tm.do(
        async (sp) => {
          expect(sp.depth).toBe(1);
          sp.afterCommit(() => {
            afterCommit.push('domain');
          });
          sp.afterRollback(() => {
            afterRollback.push('domain');
          });
          await add(sp, 'b-domain-err');
          return err(new ConditionFailed());
        },
        { propagation: 'nested' },
      );
      const duplicate = await tm.do(
        async (sp) => {
          await add(sp, 'c-before-dup');
          await add(sp, 'a-outer'); // 23505 inside the savepoint
        },
        { propagation: 'nested' },
      );
      const kept = await tm.do(
        async (sp) => {
          sp.afterCommit(() => {
            afterCommit.push('kept');
          });
          await add(sp, 'd-kept');
          // a savepoint inside a savepoint
          await tm.do((sp2) => add(sp2, 'e-deeper'), { propagation: 'nested' });
          return sp.depth;
        },
        { propagation: 'nested' },
      );
      await add(tx, 'f-outer-after');
      return [domain._unsafeUnwrapErr().kind, duplicate._unsafeUnwrapErr().kind, kept._unsafeUnwrap()];
    });
    expect(outcome).toEqual(['ConditionFailed', 'UniqueViolation', 1]);
    expect(await names()).toEqual(['a-outer', 'd-kept', 'e-deeper', 'f-outer-after']);
    expect(afterCommit).toEqual(['kept']);
    expect(afterRollback).toEqual(['domain']);
  });

  it('nested: concurrent scopes on one transaction run one after the other', async () => {
    const tm = new TxManager(pool);
    const g = gate();
    await tm.doOrThrow(async () => {
      const first = tm.do(
        async (sp) => {
          await g.at('first-inside');
          await add(sp, 'first');
        },
        { propagation: 'nested' },
      );
      const second = tm.do(
        async (sp) => {
          await g.at('second-inside');
          await add(sp, 'second');
        },
        { propagation: 'nested' },
      );
      await g.reached('first-inside');
      // The first scope holds its savepoint open: the second must not have started its own yet.
      // Give an unserialized second scope every chance to send its SAVEPOINT and reach its gate.
      for (let i = 0; i < 3; i++) await pool.query('SELECT 1');
      expect(g.arrivals('second-inside')).toBe(0);
      g.open('first-inside');
      g.open('second-inside');
      await Promise.all([first, second]);
      expect(g.arrivals('second-inside')).toBe(1);
    });
    expect(await names()).toEqual(['first', 'second']);
  });

  it('requiresNew commits independently of the outer transaction, on another connection', async () => {
    const tm = new TxManager(pool);
    const result = await tm.do(async (tx) => {
      await add(tx, 'outer');
      const outerPid = await pid(tx);
      const audit = await tm.doOrThrow(
        async (independent) => {
          expect(independent).not.toBe(tx);
          await add(independent, 'audit');
          return pid(independent);
        },
        { propagation: 'requiresNew' },
      );
      expect(audit).not.toBe(outerPid);
      expect(tm.current()).toBe(tx); // back in the outer scope
      return err(new ConditionFailed());
    });
    expect(result.isErr()).toBe(true);
    expect(await names()).toEqual(['audit']); // outer rolled back, the audit row stayed
  });

  it('requiresNew fails fast with PoolExhausted on a pool of 1 instead of deadlocking', async () => {
    const tiny = new pg.Pool({ connectionString: url, max: 1 });
    tiny.on('error', () => {});
    try {
      const tm = new TxManager(tiny);
      const inner = await tm.doOrThrow(async (tx) => {
        await add(tx, 'outer');
        const independent = await tm.do((other) => add(other, 'never'), { propagation: 'requiresNew' });
        return { error: independent._unsafeUnwrapErr() };
      });
      expect(inner.error.kind).toBe('PoolExhausted');
      expect(inner.error.message).toMatch(/requiresNew inside a transaction/);
      expect(await names()).toEqual(['outer']);
      expect(tiny.totalCount - tiny.idleCount).toBe(0);
    } finally {
      await tiny.end();
    }
  });

  it('a retryable failure in an inner scope dooms the outer transaction, which retries from BEGIN', async () => {
    const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    const seen: string[] = [];
    const attempts = await tm.doOrThrow(async (tx) => {
      await add(tx, `outer-${tx.attempt}`);
      const inner = await tm.do(async (same) => {
        if (same.attempt === 1) {
          await same.query(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`);
        }
      });
      if (inner.isErr()) {
        seen.push(inner.error.kind);
        // The outer callback swallows the Err and goes on: the doomed transaction refuses further work.
        const later = await tx.query('SELECT 1').catch((e: { kind?: string }) => e.kind);
        seen.push(String(later));
      }
      return tx.attempt;
    });
    expect(attempts).toBe(2);
    expect(seen).toEqual(['SerializationFailure', 'SerializationFailure']);
    expect(await names()).toEqual(['outer-2']);
  });

  it('a retryable failure in a nested scope also dooms the outer transaction', async () => {
    const tm = new TxManager(pool, { defaults: { backoff: { baseMs: 0, capMs: 0 } } });
    const attempts = await tm.doOrThrow(async (tx) => {
      await add(tx, `outer-${tx.attempt}`);
      const inner = await tm.do(
        (sp) =>
          sp.attempt === 1 ? sp.query(`DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$`) : 1,
        { propagation: 'nested' },
      );
      if (tx.attempt === 1) expect(inner._unsafeUnwrapErr().kind).toBe('DeadlockDetected');
      return tx.attempt;
    });
    expect(attempts).toBe(2);
    expect(await names()).toEqual(['outer-2']);
  });

  it("an inner required scope's domain Err is the outer's decision; a defect propagates", async () => {
    const tm = new TxManager(pool);
    await tm.doOrThrow(async (tx) => {
      await add(tx, 'outer');
      const inner = await tm.do(async (same) => {
        await add(same, 'inner');
        return err(new ConditionFailed());
      });
      expect(inner._unsafeUnwrapErr().kind).toBe('ConditionFailed');
    });
    expect(await names()).toEqual(['inner', 'outer']);
    const bug = new Error('bug');
    await expect(
      tm.doOrThrow(async (tx) => {
        await add(tx, 'doomed');
        await tm.do(() => {
          throw bug;
        });
      }),
    ).rejects.toBe(bug);
    expect(await names()).toEqual(['inner', 'outer']);
  });

  it('a joined or nested scope cannot raise the isolation of the active transaction', async () => {
    const tm = new TxManager(pool);
    const kinds = await tm.doOrThrow(async () => {
      const joined = await tm.do(() => 1, { isolation: 'serializable' });
      const nested = await tm.do(() => 1, { isolation: 'repeatable read', propagation: 'nested' });
      const weaker = await tm.do(() => 'fine', { isolation: 'read committed' });
      const independent = await tm.do((tx) => tx.isolation, {
        isolation: 'serializable',
        propagation: 'requiresNew',
      });
      return [
        joined._unsafeUnwrapErr().kind,
        nested._unsafeUnwrapErr().kind,
        weaker._unsafeUnwrap(),
        independent._unsafeUnwrap(),
      ];
    });
    expect(kinds).toEqual(['InvalidOptions', 'InvalidOptions', 'fine', 'serializable']);
  });

  it('mandatory joins an active transaction', async () => {
    const tm = new TxManager(pool);
    await tm.doOrThrow(async (tx) => {
      const joined = await tm.doOrThrow((inner) => inner === tx, { propagation: 'mandatory' });
      expect(joined).toBe(true);
    });
  });

  it('two managers on one pool keep separate contexts', async () => {
    const a = new TxManager(pool);
    const b = new TxManager(pool);
    await a.doOrThrow(async (tx) => {
      expect(a.current()).toBe(tx);
      expect(b.current()).toBeUndefined();
    });
  });
});
