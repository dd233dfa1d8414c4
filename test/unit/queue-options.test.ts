import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { durationSchema } from '../../src/queue/queue-options.js';
import { migrationLockKey } from '../../src/queue/schema/migrate-queue.js';
import { Wakeup } from '../../src/queue/wakeup.js';
import { TxManager } from '../../src/tx/tx-manager.js';

// A pool pointed at a port nobody listens on, that records every query: validation failures must come
// back as values before anything is sent.
function recordingPool() {
  const pool = new pg.Pool({
    connectionString: 'postgres://nobody@127.0.0.1:1/none',
    connectionTimeoutMillis: 1,
  });
  const sent: string[] = [];
  const query = pool.query.bind(pool);
  (pool as unknown as { query: (...a: unknown[]) => unknown }).query = (...args: unknown[]) => {
    sent.push(String(args[0]));
    return (query as (...a: unknown[]) => unknown)(...args);
  };
  return { pool, sent };
}

describe('queue options', () => {
  const { pool, sent } = recordingPool();
  const queue = new Queue({
    pool,
    txManager: new TxManager(pool),
    tasks: { email: z.object({ to: z.string().email() }) },
  });

  it('parses durations', () => {
    expect(durationSchema.parse(250)).toBe(250);
    expect(durationSchema.parse('500ms')).toBe(500);
    expect(durationSchema.parse('2s')).toBe(2000);
    expect(durationSchema.parse('1.5m')).toBe(90_000);
    expect(durationSchema.parse('1h')).toBe(3_600_000);
    expect(durationSchema.safeParse('soon').success).toBe(false);
    expect(durationSchema.safeParse(-1).success).toBe(false);
  });

  it('returns UnknownTask / InvalidOptions without sending anything', async () => {
    expect(
      (await queue.enqueue(pool, 'sms' as 'email', { to: 'a@example.com' }))._unsafeUnwrapErr().kind,
    ).toBe('UnknownTask');
    expect((await queue.enqueue(pool, 'email', { to: 'nope' }))._unsafeUnwrapErr().kind).toBe(
      'InvalidOptions',
    );
    expect(
      (await queue.enqueue(pool, 'email', { to: 'a@example.com' }, { maxAttempts: 0 }))._unsafeUnwrapErr()
        .kind,
    ).toBe('InvalidOptions');
    expect(
      (await queue.enqueueMany(pool, 'email', [{ to: 'a@example.com' }], { keys: [] }))._unsafeUnwrapErr()
        .kind,
    ).toBe('InvalidOptions');
    expect((await queue.claim({ batch: 0 }))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(
      (await queue.fail({ id: '1', leaseToken: 'x' }, 'e', { retryIn: 'later' }))._unsafeUnwrapErr().kind,
    ).toBe('InvalidOptions');
    expect((await queue.redrive({ limit: 0 }))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect((await queue.cancel('abc'))._unsafeUnwrapErr().kind).toBe('NotFound');
    expect(() => queue.work({ email: () => {} }, { graceMs: 'forever' })).toThrowError(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
    expect(sent).toEqual([]);
  });

  it('refuses invalid queue options', () => {
    expect(
      () => new Queue({ pool, txManager: new TxManager(pool), schema: 'Bad-Name', tasks: {} }),
    ).toThrowError(expect.objectContaining({ kind: 'InvalidOptions' }));
  });

  it('derives a stable signed 64-bit migration lock key per schema', () => {
    const key = migrationLockKey('pgtxkit_queue');
    expect(key).toBe(migrationLockKey('pgtxkit_queue'));
    expect(key).not.toBe(migrationLockKey('other'));
    const n = BigInt(key);
    expect(n >= -(2n ** 63n) && n < 2n ** 63n).toBe(true);
  });
});

describe('Wakeup', () => {
  it('never loses a wake that comes before the wait', async () => {
    const w = new Wakeup();
    w.wake();
    expect(await w.wait(10_000)).toBe(true);
    expect(await w.wait(1)).toBe(false);
  });

  it('wakes a waiter', async () => {
    const w = new Wakeup();
    const waiting = w.wait(10_000);
    w.wake();
    expect(await waiting).toBe(true);
  });
});
