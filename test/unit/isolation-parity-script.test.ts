// scripts/isolation-parity.mjs: its arguments are checked before it loads the build or starts a server.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SCRIPT = fileURLToPath(new URL('../../scripts/isolation-parity.mjs', import.meta.url));
const FOLDER = fileURLToPath(new URL('../isolation/pg-txkit', import.meta.url));

function parity(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('isolation-parity.mjs arguments', () => {
  it('--help prints the usage with --pg-major and exits 0', () => {
    const r = parity('--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('--pg-major <n>');
    expect(r.stdout).toContain('--schedule <file>');
  });

  it.each(['13', '19', 'seventeen', '17.2'])(
    'refuses --pg-major %s with exit 2, naming the range',
    (major) => {
      const r = parity(FOLDER, '--pg-major', major);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`--pg-major takes a major from 14 to 18, not "${major}"`);
      expect(r.stdout).toBe('');
    },
  );

  it('refuses --pg-major with --url: one starts a server, the other names one', () => {
    const r = parity(FOLDER, '--pg-major', '16', '--url', 'postgres://localhost/postgres');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('give one of them');
  });

  it('refuses a missing folder with exit 2', () => {
    expect(parity().code).toBe(2);
    const r = parity(`${FOLDER}-absent`, '--pg-major', '16');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('no folder');
  });
});
