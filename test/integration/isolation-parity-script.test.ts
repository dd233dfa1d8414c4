// scripts/isolation-parity.mjs --pg-major: runs a folder on an embedded server of the major asked for,
// whatever PG_TXKIT_PG_MAJOR (the suite's major) says. Needs the build, as the script does.
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, inject, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SCRIPT = join(ROOT, 'scripts', 'isolation-parity.mjs');
const OWN_SPECS = join(ROOT, 'test', 'isolation', 'pg-txkit');
if (!existsSync(join(ROOT, 'dist', 'testing', 'index.js'))) {
  throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
}

const folder = mkdtempSync(join(tmpdir(), 'pg-txkit-parity-'));
afterAll(() => rmSync(folder, { recursive: true, force: true }));

function parity(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SCRIPT, ...args], { cwd: ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('isolation-parity.mjs --pg-major', () => {
  it('starts that major, not the suite one, and runs the folder on it', { timeout: 180_000 }, async () => {
    // The suite's own major (PG_TXKIT_PG_MAJOR, inherited by the script) is not the one asked for.
    const asked = inject('pgMajor') === 17 ? 16 : 17;
    for (const file of ['conditional-update.spec', 'conditional-update.out']) {
      copyFileSync(join(OWN_SPECS, file), join(folder, file));
    }
    const r = await parity([folder, '--pg-major', String(asked)]);
    expect(r.stderr).toMatch(new RegExp(`^PostgreSQL ${asked}\\.\\d+, database isolation_regression`, 'm'));
    expect(r.stdout).toContain('ok       conditional-update\n');
    expect(r.stdout).toMatch(/\n1 match, 0 differ\n$/);
    expect(r.code).toBe(0);
  });
});
