// A consumer that does not have @opentelemetry/api installed (the optional peer) installs the packed
// tarball and uses pg-txkit as the README shows: it loads, transactions and the queue work, no span is
// attempted. Nothing of the OpenTelemetry API is imported statically (a missing package would fail the
// ESM import at load time).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { url } = await useTestDatabase({ max: 2 });
const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-no-otel-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

const CONSUMER = `
import pg from 'pg';
import { z } from 'zod';
import { Queue, TxManager } from 'pg-txkit';
const pool = new pg.Pool({ connectionString: process.env.DB_URL, max: 2 });
const tm = new TxManager(pool);
const n = await tm.doOrThrow(async (tx) => (await tx.query('SELECT 41 + 1 AS n')).rows[0].n);
const queue = new Queue({ pool, txManager: tm, schema: 'no_otel_q', tasks: { t: z.object({ n: z.number() }) } });
(await queue.migrate())._unsafeUnwrap();
const job = (await queue.enqueue(pool, 't', { n }))._unsafeUnwrap();
const [claimed] = (await queue.claim())._unsafeUnwrap();
console.log(JSON.stringify({ n, telemetry: tm.telemetry === undefined, traceContext: claimed.traceContext, same: claimed.id === job.id }));
await pool.end();
`;

describe('a consumer without @opentelemetry/api', () => {
  it('loads the packed package and runs transactions and the queue', { timeout: 120_000 }, async () => {
    expect(existsSync(join(ROOT, 'dist/index.js')), 'dist/ is missing: run `npm run build` first').toBe(true);
    const { stdout: packed } = await run(
      'npm',
      ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir],
      {
        cwd: ROOT,
      },
    );
    const tarball = join(dir, packed.trim().split('\n').pop() ?? '');
    const app = join(dir, 'app');
    const modules = join(app, 'node_modules');
    await mkdir(join(modules, 'pg-txkit'), { recursive: true });
    await run('tar', ['-xzf', tarball, '-C', join(modules, 'pg-txkit'), '--strip-components=1']);
    // The consumer's own dependencies (the peers it owns) and the package's dependencies, as npm would
    // install them, and nothing of OpenTelemetry.
    const manifest = JSON.parse(await readFile(join(modules, 'pg-txkit', 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    for (const dep of ['pg', 'zod', 'neverthrow', ...Object.keys(manifest.dependencies ?? {})]) {
      await symlink(join(ROOT, 'node_modules', dep), join(modules, dep));
    }
    await writeFile(
      join(app, 'package.json'),
      JSON.stringify({ name: 'app', type: 'module', private: true }),
    );
    await writeFile(join(app, 'main.mjs'), CONSUMER);
    expect(await readdir(modules)).not.toContain('@opentelemetry');
    const { stdout } = await run(process.execPath, ['main.mjs'], {
      cwd: app,
      env: { ...process.env, DB_URL: url },
    });
    expect(JSON.parse(stdout)).toEqual({ n: 42, telemetry: true, traceContext: null, same: true });
  });
});
