import { describe, expect, it } from 'vitest';
import { scenarios } from '../../src/cli/scenarios/patterns.js';
import { createTestDatabase } from '../../src/testing/test-database.js';
import { serverUrl } from '../helpers.js';

describe('demo scenarios of the patterns (small scale)', () => {
  it('lists the six scenarios', () => {
    expect(scenarios.map((s) => s.id)).toEqual([
      'wallet-transfer',
      'seat-booking',
      'stock-decrement',
      'room-booking',
      'idempotent-payment',
      'on-call-doctors',
    ]);
  });

  for (const scenario of scenarios) {
    it(`${scenario.id}: the naive version has anomalies, the pattern has none`, async () => {
      const db = await createTestDatabase(serverUrl());
      try {
        const result = await scenario.run({
          url: db.url,
          clients: 4,
          scale: 0.1,
          onProgress: () => {},
          signal: new AbortController().signal,
        });
        expect(result.naive.anomalies).toBeGreaterThan(0);
        expect(result.pattern.anomalies).toBe(0);
        expect(result.naive.operations).toBeGreaterThan(0);
        expect(result.pattern.operations).toBe(result.naive.operations);
      } finally {
        await db.drop();
      }
    });
  }
});
