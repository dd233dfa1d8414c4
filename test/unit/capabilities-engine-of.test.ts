import { describe, expect, it } from 'vitest';
import { engineOf } from '../../src/capabilities/engine-of.js';

// The version() strings and endpoint names as each engine's documentation shows them.
describe('engineOf', () => {
  it.each([
    ['PostgreSQL 16.4 on x86_64-pc-linux-gnu, compiled by gcc', undefined, undefined, 'postgresql'],
    [
      'CockroachDB CCL v24.1.0 (x86_64-pc-linux-gnu, built 2024/05/15 21:28:29, go1.22.2)',
      undefined,
      undefined,
      'cockroachdb',
    ],
    [
      'PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, compiled by clang',
      undefined,
      undefined,
      'yugabytedb',
    ],
    ['PostgreSQL 15.2-YB-2.25.0.0-b0 on x86_64-pc-linux-gnu', undefined, undefined, 'yugabytedb'],
    ['PostgreSQL 16.4', undefined, 'abcdefghijklmnopqrstu.dsql.us-east-1.on.aws', 'aurora-dsql'],
    ['PostgreSQL 16.4', undefined, 'abcdefghijklmnopqrstu.dsql-fips.us-east-1.on.aws', 'aurora-dsql'],
    ['PostgreSQL 16.4', '12.1-1', undefined, 'citus'],
    // A host that merely contains the words is not DSQL; RDS, Neon … are PostgreSQL.
    ['PostgreSQL 16.4', undefined, 'dsql.example.com', 'postgresql'],
    ['PostgreSQL 16.4', undefined, 'ep-cool-name-123456-pooler.us-east-2.aws.neon.tech', 'postgresql'],
  ])('%s (citus %s, host %s) → %s', (version, citus, host, engine) => {
    expect(engineOf({ version, citus, host })).toBe(engine);
  });
});
