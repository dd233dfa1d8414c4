// The README's Quick start, as a newcomer runs it: from the tarball `npm pack` makes (so `files` and the
// exports map are what a user gets), in an empty project whose only other packages are the peers the
// README tells them to install, compiled with the strictest settings (skipLibCheck: false included) and
// run against PostgreSQL. The block is taken from README.md as it stands, not copied here.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { USER_COMPILER_OPTIONS } from '../fixtures/user-tsconfig.js';
import { useTestDatabase } from '../helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
/**
 * What the Quick start's `npm install` lines add besides pg-txkit, and pg-txkit's own dependencies: linked
 * from our node_modules (their dependencies resolve from there, as links resolve to their real path).
 */
const INSTALLED = ['pg', 'zod', 'neverthrow', '@types/pg', '@types/node', 'commander', 'croner', 'p-retry'];

const { url } = await useTestDatabase();
const work = mkdtempSync(join(tmpdir(), 'pg-txkit-packed-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The first ```ts block under "## Quick start". */
function quickStart(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Quick start'));
  const block = /^```ts\n([\s\S]*?)^```/m.exec(section)?.[1];
  if (!block) throw new Error('README.md has no ```ts block under "## Quick start"');
  return block;
}

describe("the README's Quick start from the packed tarball", () => {
  it('compiles under strict settings with skipLibCheck: false and runs as the README says', () => {
    // The tarball as `npm publish` would make it (dist/ is built: no scripts needed to list and pack).
    const [pack] = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], {
        cwd: ROOT,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }),
    ) as { filename: string }[];
    const project = join(work, 'app');
    const modules = join(project, 'node_modules');
    mkdirSync(join(modules, 'pg-txkit'), { recursive: true });
    mkdirSync(join(modules, '@types'), { recursive: true });
    execFileSync('tar', [
      '-xzf',
      join(work, pack?.filename ?? ''),
      '-C',
      join(modules, 'pg-txkit'),
      '--strip-components=1',
    ]);
    for (const name of INSTALLED) symlinkSync(join(ROOT, 'node_modules', name), join(modules, name));
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'app', private: true, type: 'module' }),
    );
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { ...USER_COMPILER_OPTIONS, outDir: 'out' },
        files: ['book-seat.ts'],
      }),
    );
    writeFileSync(join(project, 'book-seat.ts'), quickStart());

    const tsc = spawnSync(process.execPath, [TSC, '-p', project, '--pretty', 'false'], { encoding: 'utf8' });
    expect(`${tsc.stdout}${tsc.stderr}`.trim()).toBe('');

    const run = spawnSync(process.execPath, [join(project, 'out', 'book-seat.js')], {
      cwd: project,
      env: { ...process.env, DATABASE_URL: url },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(run.status, run.stderr).toBe(0);
    // What the Quick start's comments promise: the first booking wins, the second is refused.
    expect(run.stdout.split('\n').slice(0, 4)).toEqual([
      'ticket sent to customer 7',
      'booked',
      'ConditionFailed',
      '1 seat(s) free',
    ]);
  }, 120_000);
});
