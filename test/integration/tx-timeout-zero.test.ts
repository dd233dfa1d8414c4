import { describe, expect, it } from 'vitest';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import { countingPool } from './tx-support.js';

// One meaning of a timeout of 0 everywhere: refused (PostgreSQL would read it as "no limit", which
// nobody writing 0 expects). To wait without a limit, omit the option.
const { url } = await useTestDatabase();
const NO_LIMIT = 'omit the option for no limit';

describe('a timeout of 0 is refused, before any SQL', () => {
  it.each([
    ['lockTimeout', 0],
    ['lockTimeout', '0ms'],
    ['statementTimeout', 0],
    ['idleInTransactionTimeout', '0s'],
  ])('TxOptions %s: %s', async (option, value) => {
    const { pool, log } = countingPool(url, 1);
    const tm = new TxManager(pool);
    let calls = 0;
    const result = await tm.do(
      async () => {
        calls++;
      },
      { [option]: value },
    );
    expect(result.isErr() && result.error.kind).toBe('InvalidOptions');
    expect(result.isErr() && result.error.message).toContain(NO_LIMIT);
    expect(calls).toBe(0);
    expect(() => new TxManager(pool, { defaults: { [option]: value } })).toThrow(NO_LIMIT);
    expect(log.texts).toEqual([]);
    await pool.end();
  });

  it('withAdvisoryLock lockTimeout: 0', async () => {
    const { pool, log } = countingPool(url, 1);
    const tm = new TxManager(pool);
    const result = await withAdvisoryLock(tm, 42n, async () => 'ran', { lockTimeout: 0 });
    expect(result.isErr() && result.error.kind).toBe('InvalidOptions');
    expect(result.isErr() && result.error.message).toContain(NO_LIMIT);
    expect(log.texts).toEqual([]);
    await pool.end();
  });

  it('SessionLock lockTimeout: 0', async () => {
    const result = await SessionLock.acquire(url, 42n, { wait: 'block', lockTimeout: 0, pooler: 'direct' });
    expect(result.isErr() && result.error.kind).toBe('InvalidOptions');
    expect(result.isErr() && result.error.message).toContain(NO_LIMIT);
  });
});
