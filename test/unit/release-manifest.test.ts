// The published manifest and the release notes: what a user's `npm install` runs (nothing) and the
// version the CHANGELOG documents (the newest release section is package.json's version; new entries
// go under Unreleased until `npm run changelog:cut -- <version>`, docs/development.md).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
  scripts: Record<string, string>;
  files: string[];
};
const changelog = readFileSync(new URL('../../CHANGELOG.md', import.meta.url), 'utf8');

describe('published manifest', () => {
  it('has no install scripts (npm runs them in every consumer install; the build runs at prepack)', () => {
    const install = ['preinstall', 'install', 'postinstall', 'prepare'].filter((s) => s in pkg.scripts);
    expect(install).toEqual([]);
    expect(pkg.scripts.prepack).toBe('npm run build');
  });
});

describe('release notes', () => {
  const releases = [...changelog.matchAll(/^## \[([^\]]+)\]/gm)].map((m) => m[1]);

  it('keep an Unreleased section on top', () => {
    expect(releases[0]).toBe('Unreleased');
  });

  it("document package.json's version as the newest release", () => {
    expect(releases[1]).toBe(pkg.version);
  });
});
