import { describe, expect, it, vi } from 'vitest';
import { useTestDatabase } from '../helpers.js';

// Runs examples/leader-election.ts as it is (against this file's database through DATABASE_URL, the
// way its header says to run it) and checks what it claims: when the leader's connection is cut,
// leadership moves to ANOTHER replica.
const { url } = await useTestDatabase();

describe('examples/leader-election.ts', () => {
  it('the lock moves to another replica at every cut (never the same leader twice in a row)', async () => {
    const lines: string[] = [];
    const log = vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => {
      lines.push(args.map(String).join(' '));
    });
    const previous = process.env.DATABASE_URL;
    process.env.DATABASE_URL = url;
    try {
      await import('../../examples/leader-election.js');
    } finally {
      log.mockRestore();
      if (previous === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = previous;
    }
    const summary = lines.find((l) => l.startsWith('leaders, in order: '));
    expect(summary, lines.join('\n')).toBeDefined();
    const leaders = (summary ?? '').slice('leaders, in order: '.length).split(' → ');
    expect(lines.filter((l) => l.startsWith('-- cutting'))).toHaveLength(2);
    expect(leaders).toHaveLength(3); // the first leader and one per cut
    for (let i = 1; i < leaders.length; i++) expect(leaders[i], summary).not.toBe(leaders[i - 1]);
  }, 60_000);
});
