import { describe, expect, it } from 'vitest';
import { extensionProblem, extensionStatusOf } from '../../src/capabilities/extension-status.js';

// The decision behind Bookings.migrate()'s start-up check. 'installable' and 'not-permitted' are also
// produced by a real server in test/integration/capabilities.test.ts; 'unavailable' (a server without
// the contrib package) cannot be produced with the embedded server, which ships contrib: this is its test.
const facts = {
  ext_installed: null,
  ext_available: true,
  ext_trusted: true,
  superuser: false,
  can_create: true,
  read_only_session: false,
};

describe('extensionStatusOf', () => {
  it.each([
    [{ ...facts, ext_installed: '1.7' }, 'installed'],
    [facts, 'installable'],
    [{ ...facts, can_create: false }, 'not-permitted'],
    [{ ...facts, ext_trusted: false }, 'not-permitted'],
    [{ ...facts, ext_trusted: false, can_create: false, superuser: true }, 'installable'],
    [{ ...facts, ext_available: false }, 'unavailable'],
    [{ ...facts, ext_available: false, superuser: true }, 'unavailable'],
    [{ ...facts, read_only_session: true }, 'read-only'],
    [{ ...facts, read_only_session: true, superuser: true }, 'read-only'],
    [{ ...facts, read_only_session: true, ext_installed: '1.7' }, 'installed'],
    [{ ...facts, read_only_session: true, ext_available: false }, 'unavailable'],
  ] as const)('%o → %s', (row, status) => {
    expect(extensionStatusOf(row)).toBe(status);
  });
});

describe('extensionProblem', () => {
  it('usable states have no problem', () => {
    expect(extensionProblem('btree_gist', 'installed')).toBeUndefined();
    expect(extensionProblem('btree_gist', 'installable')).toBeUndefined();
  });
  it('names the extension and how to install it', () => {
    expect(extensionProblem('btree_gist', 'unavailable')).toMatch(
      /contrib package.*CREATE EXTENSION btree_gist/,
    );
    expect(extensionProblem('btree_gist', 'not-permitted')).toMatch(/superuser or the database owner/);
    expect(extensionProblem('btree_gist', 'read-only')).toMatch(/on the primary/);
  });
});
