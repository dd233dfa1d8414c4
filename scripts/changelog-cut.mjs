#!/usr/bin/env node
// Cuts a release in CHANGELOG.md and package.json (the release-notes workflow, docs/development.md):
//
//   npm run changelog:cut -- 0.3.0
//
// moves every entry under `## [Unreleased]` into a `## [0.3.0] — <today>` section right below it (merged
// into that section, subsection by subsection, when it exists already: run it again after merging
// branches that added lines under Unreleased), leaves an empty Unreleased section, and sets package.json's
// version. It does not commit, tag or publish. test/unit/release-manifest.test.ts holds package.json's
// version and the CHANGELOG's newest release together.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

// npm runs scripts in the package's root; test/unit/changelog-cut.test.ts runs it in a scratch copy.
const ROOT = process.cwd();
const version = process.argv[2];
if (!version || !/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version)) {
  console.error('usage: npm run changelog:cut -- <version>   (semver, e.g. 0.3.0)');
  process.exit(2);
}

/** `### Heading` → its lines, in order, for one release section's body. */
function subsections(body) {
  const map = new Map();
  let current = '';
  for (const line of body.split('\n')) {
    const h = /^### (.+)$/.exec(line);
    if (h) {
      current = h[1].trim();
      if (!map.has(current)) map.set(current, []);
    } else if (current) map.get(current).push(line);
    else if (line.trim()) {
      map.set('', [...(map.get('') ?? []), line]);
    }
  }
  for (const [k, lines] of map) {
    while (lines.length && !lines.at(-1).trim()) lines.pop();
    while (lines.length && !lines[0].trim()) lines.shift();
    if (!lines.length) map.delete(k);
  }
  return map;
}

function render(map) {
  return [...map].map(([k, lines]) => (k ? `### ${k}\n${lines.join('\n')}` : lines.join('\n'))).join('\n\n');
}

const file = join(ROOT, 'CHANGELOG.md');
const text = readFileSync(file, 'utf8');
const sections = text.split(/^(?=## \[)/m);
const head = sections.shift() ?? '';
const unreleasedAt = sections.findIndex((s) => s.startsWith('## [Unreleased]'));
if (unreleasedAt < 0) {
  console.error('CHANGELOG.md has no "## [Unreleased]" section');
  process.exit(1);
}
const unreleased = subsections(sections[unreleasedAt].replace(/^## \[Unreleased\][^\n]*\n/, ''));
const existingAt = sections.findIndex((s) => s.startsWith(`## [${version}]`));
const today = new Date().toISOString().slice(0, 10);
let release;
if (existingAt >= 0) {
  const [title] = sections[existingAt].split('\n', 1);
  const merged = subsections(sections[existingAt].slice(title.length + 1));
  for (const [k, lines] of unreleased) merged.set(k, [...(merged.get(k) ?? []), ...lines]);
  release = `${title}\n\n${render(merged)}\n\n`;
  sections.splice(existingAt, 1);
} else {
  release = `## [${version}] — ${today}\n\n${render(unreleased)}\n\n`;
}
sections.splice(unreleasedAt, 1, '## [Unreleased]\n\n', release);
writeFileSync(file, head + sections.join(''));

const pkgFile = join(ROOT, 'package.json');
const pkg = JSON.parse(readFileSync(pkgFile, 'utf8'));
pkg.version = version;
writeFileSync(pkgFile, `${JSON.stringify(pkg, null, 2)}\n`);
console.log(`CHANGELOG.md: Unreleased → ${version}; package.json version ${version}`);
