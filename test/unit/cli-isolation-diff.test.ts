import { describe, expect, it } from 'vitest';
import { unifiedDiff } from '../../src/cli/isolation-diff.js';

describe('unifiedDiff()', () => {
  it('is empty for equal texts', () => {
    expect(unifiedDiff('a\nb\n', 'a\nb\n', 'x', 'y')).toBe('');
  });

  it('prints diff -u hunks with 3 lines of context', () => {
    const before = ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12'].join('\n');
    const after = ['1', '2', '3', '4', 'five', '6', '7', '8', '9', '10', '11', '12', '13'].join('\n');
    expect(unifiedDiff(`${before}\n`, `${after}\n`, 'expected.out', 'actual')).toBe(
      [
        '--- expected.out',
        '+++ actual',
        '@@ -2,7 +2,7 @@',
        ' 2',
        ' 3',
        ' 4',
        '-5',
        '+five',
        ' 6',
        ' 7',
        ' 8',
        '@@ -10,3 +10,4 @@',
        ' 10',
        ' 11',
        ' 12',
        '+13',
        '',
      ].join('\n'),
    );
  });

  it('joins changes closer than 6 lines into one hunk, and diffs against an empty file', () => {
    expect(unifiedDiff('a\nb\nc\nd\n', 'A\nb\nc\nD\n', 'e', 'a')).toBe(
      '--- e\n+++ a\n@@ -1,4 +1,4 @@\n-a\n+A\n b\n c\n-d\n+D\n',
    );
    expect(unifiedDiff('', 'x\n', 'e', 'a')).toBe('--- e\n+++ a\n@@ -0,0 +1,1 @@\n+x\n');
  });
});
