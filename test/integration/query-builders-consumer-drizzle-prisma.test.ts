// A consumer installs the packed tarball beside drizzle-orm, Prisma 7 and @prisma/adapter-pg, and runs
// each setup line as docs/query-builders.md shows it: drizzle's `drizzle({ client: drizzleClient(tm) })`
// and Prisma's `new PrismaClient({ adapter: prismaAdapter(tm) })` with a client generated from the
// consumer's own schema (the engine-less `prisma-client` generator; compiled with tsc, as a TypeScript
// project would). Each writes in a tm.do that rolls back, and once in one that commits. Twice: with the
// same pg as the builders', and with a pg copy of the application's own (8.11) while drizzle and
// @prisma/adapter-pg load theirs (8.23): no instanceof of the application's pg classes may decide.
// And without either builder: pg-txkit/prisma fails to load naming @prisma/adapter-pg, pg-txkit/drizzle
// loads (nothing of drizzle-orm is imported at run time).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { pool, url } = await useTestDatabase({ max: 2 });
const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-qb-consumer-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

const SCHEMA = `
generator client {
  provider            = "prisma-client"
  output              = "./generated/prisma"
  moduleFormat        = "esm"
  importFileExtension = "js"
}
datasource db {
  provider = "postgresql"
}
model Note {
  id   Int    @id
  body String
  @@map("notes")
}
`;

const CONSUMER = `
import { realpathSync } from 'node:fs';
import { eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { TxManager } from 'pg-txkit';
import { drizzleClient } from 'pg-txkit/drizzle';
import { prismaAdapter } from 'pg-txkit/prisma';
import { PrismaClient } from './generated/prisma/client.js';

const notes = pgTable('notes', { id: integer().primaryKey(), body: text().notNull() });
const pool = new pg.Pool({ connectionString: process.env.DB_URL, max: 2 });
const tm = new TxManager(pool);
const db = drizzle({ client: drizzleClient(tm) });
const prisma = new PrismaClient({ adapter: prismaAdapter(tm) });

const undone = async (write: () => Promise<unknown>) =>
  tm.do(async () => {
    await write();
    throw new Error('roll back');
  }).then(() => 'committed', (e: unknown) => (e as Error).message);
const rolledBack = [
  await undone(() => db.insert(notes).values({ id: 1, body: 'drizzle' })),
  await undone(() => prisma.note.create({ data: { id: 2, body: 'prisma' } })),
];
await tm.doOrThrow(async () => {
  await db.insert(notes).values({ id: 3, body: 'drizzle' });
  await prisma.note.create({ data: { id: 4, body: 'prisma' } });
});
const seen = {
  rolledBack,
  drizzle: await db.select().from(notes).where(eq(notes.id, 4)),
  prisma: await prisma.note.findMany({ orderBy: { id: 'asc' } }),
};
console.log(JSON.stringify({ pg: realpathSync('node_modules/pg').split('/').pop(), ...seen }));
await prisma.$disconnect();
await pool.end();
`;

describe('a consumer of the packed package with drizzle and Prisma', () => {
  let tarball = '';
  beforeAll(async () => {
    expect(existsSync(join(ROOT, 'dist/integrations/prisma/index.js')), 'run `npm run build` first').toBe(
      true,
    );
    await pool.query('CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL)');
    const { stdout: packed } = await run(
      'npm',
      ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir],
      { cwd: ROOT },
    );
    tarball = join(dir, packed.trim().split('\n').pop() ?? '');
  }, 120_000);

  it.each([
    ['pg', 'the same pg as the builders'],
    ['pg-oldest', 'a pg of its own (8.11), the builders theirs'],
  ])('runs both setup lines as the docs show them, with %s: %s', { timeout: 180_000 }, async (pgPackage) => {
    await pool.query('TRUNCATE notes');
    const app = join(dir, `app-${pgPackage}`);
    const modules = join(app, 'node_modules');
    await mkdir(join(modules, 'pg-txkit'), { recursive: true });
    await run('tar', ['-xzf', tarball, '-C', join(modules, 'pg-txkit'), '--strip-components=1']);
    // The consumer's own packages (pg, zod, neverthrow, the builders …), as installed by npm.
    for (const entry of await readdir(join(ROOT, 'node_modules'))) {
      if (entry.startsWith('.') || entry === 'pg-txkit' || entry === 'pg') continue;
      await symlink(join(ROOT, 'node_modules', entry), join(modules, entry));
    }
    await symlink(join(ROOT, 'node_modules', pgPackage), join(modules, 'pg'));
    expect(await realpath(join(modules, 'pg'))).toBe(await realpath(join(ROOT, 'node_modules', pgPackage)));
    await writeFile(
      join(app, 'package.json'),
      JSON.stringify({ name: 'app', type: 'module', private: true }),
    );
    await writeFile(join(app, 'schema.prisma'), SCHEMA);
    await writeFile(join(app, 'main.ts'), CONSUMER);
    await writeFile(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: true,
          types: ['node'],
          outDir: 'out',
        },
        include: ['main.ts', 'generated/**/*.ts'],
      }),
    );
    await run(
      process.execPath,
      [join(ROOT, 'node_modules/prisma/build/index.js'), 'generate', '--schema', 'schema.prisma'],
      {
        cwd: app,
        env: {
          ...process.env,
          PRISMA_SCHEMA_ENGINE_BINARY: join(ROOT, 'scripts/no-schema-engine.mjs'),
          PRISMA_HIDE_UPDATE_MESSAGE: '1',
        },
      },
    );
    const compiled = await run(
      process.execPath,
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'],
      {
        cwd: app,
      },
    ).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? String(error) }));
    expect(compiled.stdout).toBe('');
    const { stdout } = await run(process.execPath, ['out/main.js'], {
      cwd: app,
      env: { ...process.env, DB_URL: url },
    });
    expect(JSON.parse(stdout)).toEqual({
      pg: pgPackage,
      rolledBack: ['roll back', 'roll back'],
      drizzle: [{ id: 4, body: 'prisma' }],
      prisma: [
        { id: 3, body: 'drizzle' },
        { id: 4, body: 'prisma' },
      ],
    });
  });

  it('without drizzle-orm and Prisma: pg-txkit/prisma fails naming @prisma/adapter-pg; pg-txkit/drizzle loads (it imports nothing of drizzle at run time)', {
    timeout: 120_000,
  }, async () => {
    const app = join(dir, 'app-no-builder');
    const modules = join(app, 'node_modules');
    await mkdir(join(modules, 'pg-txkit'), { recursive: true });
    await run('tar', ['-xzf', tarball, '-C', join(modules, 'pg-txkit'), '--strip-components=1']);
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
    await writeFile(
      join(app, 'main.mjs'),
      `const prisma = await import('pg-txkit/prisma').then(() => 'loaded', (e) => e.code + ' ' + e.message);
const drizzle = await import('pg-txkit/drizzle').then((m) => typeof m.drizzleClient, (e) => e.message);
console.log(JSON.stringify({ prisma, drizzle }));
`,
    );
    const { stdout } = await run(process.execPath, ['main.mjs'], { cwd: app });
    const result = JSON.parse(stdout) as { prisma: string; drizzle: string };
    expect(result.prisma).toMatch(/^ERR_MODULE_NOT_FOUND .*'@prisma\/adapter-pg'/);
    expect(result.drizzle).toBe('function');
  });
});
