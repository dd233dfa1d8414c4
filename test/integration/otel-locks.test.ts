import { describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { advisoryKey, Queue, SessionLock, TxManager, withAdvisoryLock } from '../../src/index.js';
import { registerOtel } from '../fixtures/otel-sdk.js';
import { eventually } from '../fixtures/queue-helpers.js';
import { recordingLogger } from '../fixtures/recording-logger.js';
import { useTestDatabase } from '../helpers.js';

const otel = registerOtel();
const { pool, url } = await useTestDatabase();

describe('spans of lock waits and migrations', () => {
  it('withAdvisoryLock: an advisory lock span inside the attempt', async () => {
    const tm = new TxManager(pool);
    otel.reset();
    const key = advisoryKey('jobs', 'nightly');
    (await withAdvisoryLock(tm, key, () => 1))._unsafeUnwrap();
    const spans = otel.spans();
    const lock = spans.find((s) => s.name === 'advisory lock');
    const attempt = spans.find((s) => s.name === 'transaction.attempt');
    expect(lock?.parentSpanContext?.spanId).toBe(attempt?.spanContext().spanId);
    expect(lock?.attributes['db.operation.name']).toBe('pg_advisory_xact_lock');
    expect(lock?.attributes['pg_txkit.lock.outcome']).toBe('acquired');
    expect(lock?.attributes['pg_txkit.lock.keys']).toBe(key.toString());
  });

  it('SessionLock: a busy try is a failed lock span with error.type LockBusy', async () => {
    const key = advisoryKey('leader', 'a');
    const first = (await SessionLock.acquire(url, key, { pooler: 'direct' }))._unsafeUnwrap();
    otel.reset();
    try {
      const second = await SessionLock.acquire(url, key, { pooler: 'direct' });
      expect(second.isErr() && second.error.kind).toBe('LockBusy');
      const lock = otel.spans().find((s) => s.name === 'advisory lock');
      expect(lock?.attributes['pg_txkit.lock.scope']).toBe('session');
      expect(lock?.attributes['error.type']).toBe('LockBusy');
      expect(lock?.attributes['pg_txkit.lock.outcome']).toBe('not acquired');
    } finally {
      await first.release();
    }
  });

  it('SessionLock: a lost lock is logged at warn', async () => {
    const { lines, logger } = recordingLogger();
    const lock = (
      await SessionLock.acquire(url, advisoryKey('leader', 'b'), { pooler: 'direct', logger, checkEvery: 50 })
    )._unsafeUnwrap();
    await pool.query('SELECT pg_terminate_backend($1)', [lock.pid]);
    await eventually(() => lock.lost.aborted);
    const warn = lines.find((l) => l.level === 'warn');
    expect(warn?.msg).toMatch(/session lock .* lost/);
    expect(warn?.obj.pid).toBe(lock.pid);
    await lock.release();
  });

  it('queue.migrate(): a migrate span with the versions applied, logged at info', async () => {
    const { lines, logger } = recordingLogger();
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'mig_q',
      tasks: { t: z.object({}) },
      logger,
    });
    otel.reset();
    const migrated = (await queue.migrate())._unsafeUnwrap();
    const span = otel.spans().find((s) => s.name === 'migrate mig_q');
    expect(span?.attributes['pg_txkit.migration.applied']).toBe(migrated.applied.join(','));
    expect(span?.attributes['db.system.name']).toBe('postgresql');
    expect(lines.find((l) => l.level === 'info')?.msg).toMatch(/mig_q: applied/);
  });
});
