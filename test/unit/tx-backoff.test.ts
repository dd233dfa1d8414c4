import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fullJitterDelay } from '../../src/tx/backoff.js';

describe('fullJitterDelay', () => {
  it('stays within [0, min(cap, base * 2^(retry-1))] and is an integer', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (retry, baseMs, extra, r) => {
          const capMs = baseMs + extra;
          const delay = fullJitterDelay(retry, { baseMs, capMs }, () => r);
          const ceiling = Math.min(capMs, baseMs * 2 ** (retry - 1));
          expect(Number.isInteger(delay)).toBe(true);
          expect(delay).toBeGreaterThanOrEqual(0);
          expect(delay).toBeLessThanOrEqual(ceiling);
        },
      ),
    );
  });

  it('spans the whole interval (full jitter, not equal jitter)', () => {
    const backoff = { baseMs: 10, capMs: 1000 };
    expect(fullJitterDelay(1, backoff, () => 0)).toBe(0);
    expect(fullJitterDelay(1, backoff, () => 0.9999)).toBe(10);
    expect(fullJitterDelay(3, backoff, () => 0.5)).toBe(20);
    expect(fullJitterDelay(30, backoff, () => 0.9999)).toBe(1000);
  });

  it('survives a broken random source', () => {
    expect(fullJitterDelay(2, { baseMs: 10, capMs: 100 }, () => Number.NaN)).toBe(0);
    expect(fullJitterDelay(2, { baseMs: 10, capMs: 100 }, () => 7)).toBe(20);
  });

  it('uses Math.random by default and stays in bounds', () => {
    for (let i = 0; i < 100; i++) {
      const d = fullJitterDelay(4, { baseMs: 10, capMs: 1000 });
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThanOrEqual(80);
    }
  });
});
