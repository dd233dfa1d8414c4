// Bundled (esbuild) into one file and run from an empty directory, a consumer migrates the queue and
// runs a job: the migrations are part of the JavaScript, nothing is read from disk at run time.
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { build } from 'esbuild';
import { afterAll, describe, expect, it } from 'vitest';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';
import { useTestDatabase } from '../helpers.js';

const { url } = await useTestDatabase({ max: 2 });
const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-bundle-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('bundled queue', () => {
  it('migrates and runs a job from a single esbuild bundle', { timeout: 60_000 }, async () => {
    const outfile = join(dir, 'consumer.mjs');
    await build({
      entryPoints: [fileURLToPath(new URL('../fixtures/queue-bundle-consumer.ts', import.meta.url))],
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      outfile,
      external: ['pg-native'],
      // pg is CommonJS: give the ESM bundle a require for Node's built-in modules.
      banner: {
        js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
      },
      logLevel: 'silent',
    });
    expect(await readdir(dir)).toEqual(['consumer.mjs']);
    const { stdout } = await promisify(execFile)(process.execPath, [outfile], {
      cwd: dir,
      env: { ...process.env, QUEUE_BUNDLE_URL: url },
      timeout: 50_000,
    }).catch((e: { stdout?: string; stderr?: string }) => ({ stdout: e.stdout ?? '', stderr: e.stderr }));
    expect(JSON.parse(stdout)).toEqual({ applied: QUEUE_MIGRATIONS.map((m) => m.version), ran: [7] });
  });
});
