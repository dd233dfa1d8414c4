import { describe, expect, it } from 'vitest';
import { InvalidOptions } from '../../src/errors/index.js';
import { beginOptions, isDrizzleBegin } from '../../src/integrations/drizzle/begin-options.js';
import { prismaIsolation } from '../../src/integrations/prisma/prisma-isolation.js';

// What a builder's own transaction asks for, read into the manager's options.
describe("drizzle's BEGIN, read back into the manager's options", () => {
  it.each([
    ['begin', {}],
    ['begin isolation level serializable', { isolation: 'serializable' }],
    ['begin isolation level repeatable read read only', { isolation: 'repeatable read', readOnly: true }],
    ['begin isolation level read uncommitted', { isolation: 'read committed' }],
    ['begin read write', { readOnly: false }],
    [
      'begin isolation level serializable read only deferrable',
      { isolation: 'serializable', readOnly: true, deferrable: true },
    ],
    ['begin not deferrable', { deferrable: false }],
  ])('%s', (text, options) => {
    expect(isDrizzleBegin(text)).toBe(true);
    expect(beginOptions(text)).toEqual(options);
  });

  it('anything else is refused with InvalidOptions, never guessed', () => {
    expect(() => beginOptions('begin isolation level chaos')).toThrow(InvalidOptions);
    expect(() => beginOptions('begin; commit')).toThrow(InvalidOptions);
  });

  it('only a BEGIN is one (a table named begin_x is not)', () => {
    expect(isDrizzleBegin('beginning')).toBe(false);
    expect(isDrizzleBegin('select 1')).toBe(false);
  });
});

describe("Prisma's isolationLevel, as the manager's", () => {
  it.each([
    ['READ UNCOMMITTED', 'read committed'],
    ['READ COMMITTED', 'read committed'],
    ['REPEATABLE READ', 'repeatable read'],
    ['SERIALIZABLE', 'serializable'],
  ] as const)('%s → %s', (level, isolation) => {
    expect(prismaIsolation(level)).toBe(isolation);
  });

  it("SNAPSHOT (SQL Server's) is refused with InvalidOptions", () => {
    expect(() => prismaIsolation('SNAPSHOT')).toThrow(InvalidOptions);
  });
});
