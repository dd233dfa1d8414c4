import { describe, expect, it } from 'vitest';
import { planScope } from '../../src/tx/propagation.js';
import { PROPAGATIONS } from '../../src/tx/tx-options.js';

describe('planScope', () => {
  it('maps every propagation mode, inside and outside a transaction', () => {
    const table = Object.fromEntries(
      PROPAGATIONS.map((mode) => [mode, [planScope(mode, false), planScope(mode, true)]]),
    );
    expect(table).toEqual({
      required: ['begin', 'join'],
      nested: ['begin', 'savepoint'],
      requiresNew: ['begin', 'beginIndependent'],
      mandatory: ['notInTransaction', 'join'],
    });
  });

  it('refuses an unknown mode (a bug)', () => {
    expect(() => planScope('supports' as never, true)).toThrow(TypeError);
  });
});
