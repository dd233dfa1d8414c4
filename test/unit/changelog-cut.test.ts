// scripts/changelog-cut.mjs (`npm run changelog:cut -- <version>`) on a scratch copy of a changelog.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const SCRIPT = fileURLToPath(new URL('../../scripts/changelog-cut.mjs', import.meta.url));
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function cut(
  changelog: string,
  version: string,
): { code: number | null; changelog: string; version: string } {
  const dir = mkdtempSync(join(tmpdir(), 'pg-txkit-changelog-'));
  dirs.push(dir);
  writeFileSync(join(dir, 'CHANGELOG.md'), changelog);
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify({ name: 'x', version: '0.1.0' }, null, 2)}\n`);
  const r = spawnSync(process.execPath, [SCRIPT, version], { cwd: dir, encoding: 'utf8' });
  return {
    code: r.status,
    changelog: readFileSync(join(dir, 'CHANGELOG.md'), 'utf8'),
    version: (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version,
  };
}

const HEAD = '# Changelog\n\nNotes.\n\n';
const OLD = '## [0.1.0] — first\n\n### Added\n- old thing\n';

describe('changelog:cut', () => {
  it('moves the Unreleased entries into a dated release and sets the version', () => {
    const r = cut(
      `${HEAD}## [Unreleased]\n\n### Added\n- new thing\n\n### Fixed\n- a bug\n\n${OLD}`,
      '0.2.0',
    );
    expect(r.code).toBe(0);
    expect(r.version).toBe('0.2.0');
    expect(r.changelog).toMatch(
      /^# Changelog\n\nNotes\.\n\n## \[Unreleased\]\n\n## \[0\.2\.0\] — \d{4}-\d{2}-\d{2}\n\n### Added\n- new thing\n\n### Fixed\n- a bug\n\n## \[0\.1\.0\] — first\n/,
    );
  });

  it('merges later Unreleased entries into an existing section of the same version, subsection by subsection', () => {
    const released = `${HEAD}## [Unreleased]\n\n### Fixed\n- late fix\n\n### Changed\n- late change\n\n## [0.2.0] — 2026-12-04\n\n### Added\n- new thing\n\n### Fixed\n- a bug\n\n${OLD}`;
    const r = cut(released, '0.2.0');
    expect(r.code).toBe(0);
    expect(r.changelog).toContain(
      '## [Unreleased]\n\n## [0.2.0] — 2026-12-04\n\n### Added\n- new thing\n\n### Fixed\n- a bug\n- late fix\n\n### Changed\n- late change\n\n## [0.1.0]',
    );
  });

  it('refuses a version that is not semver, changing nothing', () => {
    const text = `${HEAD}## [Unreleased]\n\n### Added\n- x\n`;
    const r = cut(text, 'next');
    expect(r.code).toBe(2);
    expect(r.changelog).toBe(text);
    expect(r.version).toBe('0.1.0');
  });
});
