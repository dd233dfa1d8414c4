// Every link of the README and of the docs resolves for a user of the package: the files npm would
// pack (`npm pack --dry-run --json`, so `files` in package.json decides) hold the README, every page of
// docs/, and every file and heading those pages link to. A link to a file left out of the tarball (src/,
// test/, a page not shipped) or to a heading that does not exist fails here.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The paths npm packs, relative to the package root (scripts skipped: listing needs no build). */
function packedFiles(): Set<string> {
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const out = execFileSync(npm, ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const [report] = JSON.parse(out) as { files: { path: string }[] }[];
  return new Set((report?.files ?? []).map((f) => f.path));
}

/** Every markdown page of docs/ in the repository, however deep. */
function docsPages(dir = 'docs'): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? docsPages(`${dir}/${e.name}`) : e.name.endsWith('.md') ? [`${dir}/${e.name}`] : [],
  );
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const m of withoutCode(text).matchAll(/^#{1,6}\s+(.*)$/gm)) {
    const base = slug(m[1] ?? '');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** The text without fenced code blocks (a `[x](y)` in code is not a link). */
function withoutCode(text: string): string {
  return text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\S\n]*$/gm, '');
}

/** Relative links of a page: `[text](target)` and `[text]: target`, web and mail links left out. */
function linksOf(text: string): string[] {
  const body = withoutCode(text).replace(/`[^`\n]*`/g, '');
  const inline = [...body.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1] ?? '');
  const reference = [...body.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/gm)].map((m) => m[1] ?? '');
  return [...inline, ...reference].filter((t) => t && !/^[a-z][a-z0-9+.-]*:/i.test(t));
}

const packed = packedFiles();
const pages = ['README.md', ...docsPages().sort()];

describe('links in the README and docs resolve inside the packed package', () => {
  it.each(pages)('%s is in the tarball', (page) => {
    expect(packed.has(page), `${page} is not packed: add it to "files" in package.json`).toBe(true);
  });

  it.each(pages)('every link of %s resolves to a packed file (and heading)', (page) => {
    const text = readFileSync(join(ROOT, page), 'utf8');
    const broken: string[] = [];
    for (const link of linksOf(text)) {
      const [path = '', anchor] = link.split('#', 2);
      const target =
        path === '' ? page : normalize(join(dirname(page), decodeURIComponent(path))).replace(/\\/g, '/');
      const isDir = [...packed].some((f) => f.startsWith(`${target.replace(/\/$/, '')}/`));
      if (!packed.has(target) && !isDir) {
        broken.push(`${link} (${target} is not in the tarball)`);
        continue;
      }
      if (anchor && target.endsWith('.md') && packed.has(target)) {
        const anchors = anchorsOf(readFileSync(join(ROOT, target), 'utf8'));
        if (!anchors.has(anchor.toLowerCase())) broken.push(`${link} (no heading #${anchor} in ${target})`);
      }
    }
    expect(broken).toEqual([]);
  });
});
