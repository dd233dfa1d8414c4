import { describe, expect, it } from 'vitest';
import { scenarios } from '../../src/cli/scenarios/advisory.js';
import { createTestDatabase } from '../../src/testing/test-database.js';
import { serverUrl } from '../helpers.js';

describe('advisory demo scenarios', () => {
  for (const scenario of scenarios) {
    it(`${scenario.id}: naive finds anomalies, the pattern none`, async () => {
      const db = await createTestDatabase(serverUrl());
      try {
        const result = await scenario.run({
          url: db.url,
          clients: 6,
          scale: 0.2,
          onProgress: () => {},
          signal: new AbortController().signal,
        });
        expect(result.naive.anomalies).toBeGreaterThan(0);
        expect(result.pattern.anomalies).toBe(0);
        expect(result.pattern.operations).toBeGreaterThan(0);
      } finally {
        await db.drop();
      }
    });
  }
});
