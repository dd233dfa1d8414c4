// A consumer installs the packed tarball with ONE query builder (the optional peer it owns) and runs
// that builder's setup line as docs/query-builders.md shows it; a consumer with no builder imports
// 'pg-txkit' as before, and a builder's subpath without the builder fails to load naming the package.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { url, pool } = await useTestDatabase({ max: 2 });
const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-builders-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

let tarball = '';
beforeAll(async () => {
  expect(existsSync(join(ROOT, 'dist/index.js')), 'dist/ is missing: run `npm run build` first').toBe(true);
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir], {
    cwd: ROOT,
  });
  tarball = join(dir, stdout.trim().split('\n').pop() ?? '');
  await pool.query(
    'CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO accounts VALUES (1, 100)',
  );
}, 120_000);

/** An application with the packed pg-txkit, the peers it owns (pg, zod, neverthrow) and `builders`. */
async function app(name: string, builders: readonly string[], main: string): Promise<string> {
  const root = join(dir, name);
  const modules = join(root, 'node_modules');
  await mkdir(join(modules, 'pg-txkit'), { recursive: true });
  await run('tar', ['-xzf', tarball, '-C', join(modules, 'pg-txkit'), '--strip-components=1']);
  const manifest = JSON.parse(await readFile(join(modules, 'pg-txkit', 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
  };
  for (const dep of ['pg', 'zod', 'neverthrow', ...builders, ...Object.keys(manifest.dependencies ?? {})]) {
    await symlink(join(ROOT, 'node_modules', dep), join(modules, dep));
  }
  await writeFile(join(root, 'package.json'), JSON.stringify({ name, type: 'module', private: true }));
  await writeFile(join(root, 'main.mjs'), main);
  const { stdout } = await run(process.execPath, ['main.mjs'], {
    cwd: root,
    env: { ...process.env, DB_URL: url },
  });
  return stdout.trim();
}

const SETUP = `
import pg from 'pg';
import { TxManager } from 'pg-txkit';
const pool = new pg.Pool({ connectionString: process.env.DB_URL, max: 2 });
const tm = new TxManager(pool);
`;

describe('the packed package in a consumer', () => {
  it('with Kysely: kyselyDialect(tm) as the docs show it', { timeout: 120_000 }, async () => {
    const out = await app(
      'with-kysely',
      ['kysely'],
      `${SETUP}
import { Kysely } from 'kysely';
import { kyselyDialect } from 'pg-txkit/kysely';
const db = new Kysely({ dialect: kyselyDialect(tm) });
const row = await tm.doOrThrow(async () => {
  await db.updateTable('accounts').set({ balance: 101 }).where('id', '=', 1).execute();
  return db.selectFrom('accounts').select('balance').where('id', '=', 1).executeTakeFirstOrThrow();
});
console.log(JSON.stringify(row));
await db.destroy();
await pool.end();
`,
    );
    expect(JSON.parse(out)).toEqual({ balance: 101 });
  });

  it('with Knex: knex(knexConfig(tm)) as the docs show it', { timeout: 120_000 }, async () => {
    const out = await app(
      'with-knex',
      ['knex'],
      `${SETUP}
import knex from 'knex';
import { knexConfig } from 'pg-txkit/knex';
const db = knex(knexConfig(tm));
const row = await tm.doOrThrow(async () => {
  await db('accounts').where({ id: 1 }).increment('balance', 1);
  return db('accounts').select('balance').where({ id: 1 }).first();
});
console.log(JSON.stringify(row));
await db.destroy();
await pool.end();
`,
    );
    expect(JSON.parse(out)).toEqual({ balance: 102 });
  });

  it("without any builder: 'pg-txkit' loads; a builder's subpath fails naming the missing builder", {
    timeout: 120_000,
  }, async () => {
    const out = await app(
      'no-builder',
      [],
      `${SETUP}
const n = await tm.doOrThrow(async (tx) => (await tx.query('SELECT 41 + 1 AS n')).rows[0].n);
const missing = await import('pg-txkit/kysely').then(() => 'loaded', (e) => e.code + ' ' + e.message);
console.log(JSON.stringify({ n, missing }));
await pool.end();
`,
    );
    const result = JSON.parse(out) as { n: number; missing: string };
    expect(result.n).toBe(42);
    expect(result.missing).toMatch(/^ERR_MODULE_NOT_FOUND .*'kysely'/);
  });
});
