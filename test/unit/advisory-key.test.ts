import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import {
  advisoryKey,
  advisoryKeyPair,
  compareAdvisoryKeys,
  formatAdvisoryKey,
  isAdvisoryKey,
  keyFromLockTag,
  lockTagOf,
  sortedUniqueKeys,
} from '../../src/advisory/advisory-key.js';

describe('advisoryKey', () => {
  it('is the first 8 bytes of sha256("namespace:id"), signed big-endian — fixed vectors (a public contract)', () => {
    // Computed independently (Python: int.from_bytes(sha256(s).digest()[:8], 'big', signed=True)).
    expect(advisoryKey('invoice-close', 'tenant-1:2026-11')).toBe(-5103727204727418209n);
    expect(advisoryKey('daily-post', '2026-11-30')).toBe(-9117061727731882274n);
    expect(advisoryKey('a', 1)).toBe(3110932526201151071n);
    expect(advisoryKey('a', 1n)).toBe(3110932526201151071n);
    expect(advisoryKey('ns', 'éè')).toBe(882441251862055131n); // UTF-8
  });

  test.prop([fc.string({ minLength: 1 }).filter((s) => !s.includes(':')), fc.string({ minLength: 1 })])(
    'is deterministic and always in the signed 64-bit range',
    (ns, id) => {
      const a = advisoryKey(ns, id);
      expect(advisoryKey(ns, id)).toBe(a);
      expect(isAdvisoryKey(a)).toBe(true);
    },
  );

  it('returns the bigint itself, usable inline as a query parameter', () => {
    const key: bigint = advisoryKey('a', 1);
    expect(typeof key).toBe('bigint');
    expect(key).toBe(3110932526201151071n);
  });

  it('throws InvalidOptions on bad input (a defect in the calling code)', () => {
    const cases: [string, string | number | bigint][] = [
      ['', 'x'],
      ['a:b', 'x'],
      ['ns', ''],
      ['ns', 1.5],
      ['ns', Number.NaN],
      ['ns', 2 ** 60],
    ];
    for (const [ns, id] of cases) {
      expect(() => advisoryKey(ns, id)).toThrow(expect.objectContaining({ kind: 'InvalidOptions' }));
    }
  });
});

describe('advisoryKeyPair', () => {
  it('accepts int32 values and rejects the rest', () => {
    expect(advisoryKeyPair(30, 42)._unsafeUnwrap()).toEqual({ namespace: 30, id: 42 });
    expect(advisoryKeyPair(-(2 ** 31), 2 ** 31 - 1).isOk()).toBe(true);
    for (const [a, b] of [
      [2 ** 31, 0],
      [0, -(2 ** 31) - 1],
      [1.5, 0],
      [0, Number.POSITIVE_INFINITY],
    ] as const) {
      const r = advisoryKeyPair(a, b);
      expect(r.isErr() && r.error.kind).toBe('InvalidOptions');
    }
  });
});

describe('pg_locks tags', () => {
  test.prop([fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n })])(
    'bigint keys round-trip through classid/objid',
    (k) => {
      const tag = lockTagOf(k);
      expect(tag.objsubid).toBe(1);
      expect(tag.classid).toBeGreaterThanOrEqual(0);
      expect(tag.classid).toBeLessThan(2 ** 32);
      expect(keyFromLockTag(tag.classid, tag.objid, tag.objsubid)).toBe(k);
    },
  );

  test.prop([fc.integer(), fc.integer()])('pairs round-trip', (a, b) => {
    const pair = advisoryKeyPair(a, b)._unsafeUnwrap();
    const tag = lockTagOf(pair);
    expect(keyFromLockTag(tag.classid, tag.objid, tag.objsubid)).toEqual(pair);
  });
});

describe('acquisition order', () => {
  it('deduplicates and sorts: bigints ascending, then pairs', () => {
    const keys = sortedUniqueKeys([
      { namespace: 2, id: 1 },
      5n,
      -3n,
      { namespace: 1, id: 9 },
      5n,
      { namespace: 2, id: 1 },
    ]);
    expect(keys.map(formatAdvisoryKey)).toEqual(['-3', '5', '1/9', '2/1']);
  });

  test.prop([fc.array(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), { maxLength: 10 })])(
    'any permutation gives the same order',
    (keys) => {
      const a = sortedUniqueKeys(keys);
      const b = sortedUniqueKeys([...keys].reverse());
      expect(a).toEqual(b);
      for (let i = 1; i < a.length; i++) expect(compareAdvisoryKeys(a[i - 1]!, a[i]!)).toBeLessThan(0);
    },
  );
});
