// Every ```ts block of README.md and docs/*.md compiles against the BUILT package as a careful user's
// project would compile it: strict, noUncheckedIndexedAccess, exactOptionalPropertyTypes and
// skipLibCheck: false ('pg-txkit' and 'pg-txkit/testing' resolve to dist/ through package.json's
// exports), and the complete programs among them run against this run's PostgreSQL (DATABASE_URL = a
// fresh database per block).
//
// A block whose first line is `// fragment: declares a, b` is part of a larger program: it is compiled
// with `a` and `b` declared (types from FREE_VARIABLES below, or `name: Type` in the line itself) and
// the public names it uses imported from 'pg-txkit' / 'pg-txkit/testing' (plus pg, zod and neverthrow's
// ok/err), and not run. Every other block is a complete program: compiled as it stands and run.
import { spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../../src/testing/test-database.js';
import { USER_COMPILER_OPTIONS } from '../fixtures/user-tsconfig.js';
import { serverUrl } from '../helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
/** The generated Prisma client the docs' Prisma blocks are compiled against (scripts/prisma-generate.mjs). */
const PRISMA_CLIENT = join(ROOT, 'test', 'fixtures', 'query-builders', 'prisma', 'generated', 'client.js');

/**
 * The free variables the docs' fragments use by convention: a type, and a value when a fragment that
 * uses only such names can run (against DATABASE_URL; pools exit when idle).
 */
const FREE_VARIABLES: Readonly<Record<string, { type: string; value?: string }>> = {
  pool: {
    type: 'pg.Pool',
    value: 'new pg.Pool({ connectionString: process.env.DATABASE_URL, allowExitOnIdle: true })',
  },
  tm: {
    type: 'TxManager',
    value:
      'new TxManager(new pg.Pool({ connectionString: process.env.DATABASE_URL, allowExitOnIdle: true }))',
  },
  url: { type: 'string', value: "process.env.DATABASE_URL ?? ''" },
  email: { type: 'string', value: "'ann@example.com'" },
  id: { type: 'number', value: '1' },
  userId: { type: 'number', value: '1' },
  seatId: { type: 'number', value: '1' },
  customerId: { type: 'number', value: '7' },
  doctorId: { type: 'number', value: '1' },
  tenantId: { type: 'string', value: "'acme'" },
  period: { type: 'string', value: "'2026-11'" },
  day: { type: 'string', value: "'2026-11-30'" },
  body: { type: 'string', value: "'hello'" },
  log: { type: 'Pick<Console, "info" | "warn" | "error">', value: 'console' },
  notify: { type: '(id: number) => void', value: '() => {}' },
  notifyRoster: { type: '(doctorId: number) => Promise<void>', value: 'async () => {}' },
  sendTicket: { type: '(customerId: number) => Promise<void>', value: 'async () => {}' },
  reply: { type: '(status: number) => void', value: '() => {}' },
  EmailTaken: {
    type: "new () => Error & { readonly kind: 'EmailTaken' }",
    value: "class extends Error { readonly kind = 'EmailTaken' as const; }",
  },
  CannotPublish: {
    type: "new () => Error & { readonly kind: 'CannotPublish' }",
    value: "class extends Error { readonly kind = 'CannotPublish' as const; }",
  },
  tx: { type: 'Tx' },
  db: { type: 'Db' },
  client: { type: 'pg.Client' },
  from: { type: 'number' },
  to: { type: 'number' },
  amount: { type: 'number' },
  me: { type: 'number' },
  shift: { type: 'number' },
  orderId: { type: 'number' },
  sku: { type: 'string' },
  jobId: { type: 'string' },
  MIGRATOR_URL: { type: 'string' },
  orders: { type: '{ id: number; email: string }[]' },
  order: { type: '{ id: number; total: number }' },
  req: { type: '{ headers: Record<string, string>; body: unknown }' },
  sha256: { type: '(data: unknown) => string' },
  charge: { type: '(tx: Tx, order: { id: number; total: number }) => Promise<{ chargeId: string }>' },
  mailer: {
    type: '{ send(to: string | number, options: { idempotencyKey: string; signal: AbortSignal }): Promise<void> }',
  },
  metrics: { type: '{ histogram(name: string, value: number, tags: object): void }' },
  migrate: { type: '(tx: Tx) => Promise<void>' },
  runScheduler: { type: '(options: { signal: AbortSignal }) => Promise<void>' },
  withdraw: { type: '(read: string) => string[]' },
  backendAlive: { type: '() => Promise<boolean>' },
  proxy: { type: 'FaultProxy' },
  expect: { type: "typeof import('vitest').expect" },
  defineConfig: { type: "typeof import('vitest/config').defineConfig" },
  fn: { type: '(tx: Tx) => Promise<void>' },
  report: { type: '(tx: Tx) => Promise<void>' },
  keys: { type: 'IdempotencyKeys' },
  rooms: { type: 'Bookings' },
  tasks: { type: 'Record<string, z.ZodType>' },
  queue: { type: 'Queue<{ receipt: z.ZodObject<{ orderId: z.ZodNumber; email: z.ZodString }> }>' },
  job: { type: 'Job<{ orderId: number; email: string }>' },
  // A user's generated Prisma client: the test suite's, generated from its schema (doctors, accounts, users).
  PrismaClient: { type: `typeof import(${JSON.stringify(PRISMA_CLIENT)}).PrismaClient` },
  Prisma: { type: `typeof import(${JSON.stringify(PRISMA_CLIENT)}).Prisma` },
};

interface Block {
  readonly name: string;
  readonly where: string;
  readonly code: string;
  readonly fragment: boolean;
  /** A complete program, or a fragment whose free variables all have values (see FREE_VARIABLES). */
  readonly runs: boolean;
}

function extractBlocks(): Block[] {
  const files = [
    'README.md',
    ...readdirSync(join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ];
  const blocks: Block[] = [];
  for (const file of files.sort()) {
    const text = readFileSync(join(ROOT, file), 'utf8');
    const fence = /^```ts[^\S\n]*([^\n]*)\n([\s\S]*?)^```[^\S\n]*$/gm;
    for (const m of text.matchAll(fence)) {
      const line = text.slice(0, m.index).split('\n').length;
      const info = (m[1] ?? '').trim();
      const code = m[2] ?? '';
      const first = code.split('\n', 1)[0] ?? '';
      const fragment = info.startsWith('fragment') || /^\/\/ fragment\b/.test(first);
      const runs = fragment
        ? !/not run/.test(first) &&
          declaredNames(code).every((d) => FREE_VARIABLES[d.name]?.value !== undefined)
        : true;
      blocks.push({
        name: `${file.replace(/[/.]/g, '-')}-${line}`,
        where: `${file}:${line}`,
        code,
        fragment,
        runs,
      });
    }
  }
  return blocks;
}

/** The names `declares …` lists (split on top-level commas), with their types. */
function declaredNames(code: string): { name: string; type: string | undefined }[] {
  const first = code.split('\n', 1)[0] ?? '';
  const m = /^\/\/ fragment[^:]*:?\s*(?:declares\s+(.*))?$/.exec(first);
  const list = m?.[1]?.trim() ?? '';
  const parts: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of list) {
    if ('<({['.includes(ch)) depth++;
    if ('>)}]'.includes(ch) && !(ch === '>' && current.endsWith('='))) depth--;
    if (ch === ',' && depth === 0) {
      parts.push(current);
      current = '';
    } else current += ch;
  }
  if (current.trim()) parts.push(current);
  return parts
    .map((p) => p.trim())
    .filter(Boolean)
    .map((p) => {
      const colon = p.indexOf(':');
      return colon < 0
        ? { name: p, type: undefined }
        : { name: p.slice(0, colon).trim(), type: p.slice(colon + 1).trim() };
    });
}

const blocks = extractBlocks();
const work = mkdtempSync(join(tmpdir(), 'pg-txkit-snippets-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A user's project: its own node_modules (links to the repository's) with pg-txkit linked to the repository. */
function setUpProject(publicNames: { main: string[]; testing: string[] }): Map<string, string> {
  const modules = join(work, 'node_modules');
  mkdirSync(modules);
  for (const entry of readdirSync(join(ROOT, 'node_modules'))) {
    if (entry.startsWith('.') || entry === 'pg-txkit') continue;
    symlinkSync(join(ROOT, 'node_modules', entry), join(modules, entry));
  }
  symlinkSync(ROOT, join(modules, 'pg-txkit'));
  writeFileSync(
    join(work, 'package.json'),
    JSON.stringify({ name: 'snippets', private: true, type: 'module' }),
  );
  writeFileSync(
    join(work, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        ...USER_COMPILER_OPTIONS,
        outDir: 'out',
        noEmitOnError: false,
      },
      include: ['*.ts'],
    }),
  );
  const errors = new Map<string, string>();
  for (const b of blocks) {
    let code = b.code;
    if (b.fragment) {
      const declared = declaredNames(b.code);
      const imported = new Set(
        [...b.code.matchAll(/import\s+(?:type\s+)?\{([^}]*)\}/g)].flatMap((m) =>
          (m[1] ?? '').split(',').map(
            (s) =>
              s
                .trim()
                .split(/\s+as\s+/)
                .pop() ?? '',
          ),
        ),
      );
      const own = new Set(
        [...b.code.matchAll(/\b(?:const|let|var|function|class)\s+([A-Za-z_$][\w$]*)/g)].map((m) => m[1]),
      );
      const text = `${b.code}\n${declared.map((d) => d.type ?? FREE_VARIABLES[d.name]?.type ?? '').join('\n')}`;
      const uses = (name: string) =>
        new RegExp(`(?<![\\w$.'])${name.replace('$', '\\$')}(?![\\w$])`).test(text);
      const skip = (n: string) => imported.has(n) || own.has(n) || declared.some((d) => d.name === n);
      const fromMain = publicNames.main.filter((n) => !skip(n) && uses(n));
      const fromTesting = publicNames.testing.filter((n) => !skip(n) && uses(n));
      const prelude = [
        /^import pg\b/m.test(b.code) ? '' : "import pg from 'pg';",
        /^import \{[^}]*\bz\b/m.test(b.code) || skip('z') ? '' : "import { z } from 'zod';",
        ['ok', 'err'].some((n) => !skip(n) && uses(n))
          ? `import { ${['ok', 'err'].filter((n) => !skip(n) && uses(n)).join(', ')} } from 'neverthrow';`
          : '',
        `import type { Db, Job, Queue as QueueType, Tx, TxManager as TxManagerType } from 'pg-txkit';`,
        "import { TxManager as TxManagerClass } from 'pg-txkit';",
        fromMain.length ? `import { ${fromMain.join(', ')} } from 'pg-txkit';` : '',
        fromTesting.length ? `import { ${fromTesting.join(', ')} } from 'pg-txkit/testing';` : '',
        ...declared.map((d) => {
          const known = FREE_VARIABLES[d.name];
          const type = (d.type ?? known?.type ?? 'MISSING_TYPE_FOR_FREE_VARIABLE')
            .replace(/\bQueue</g, 'QueueType<')
            .replace(/^TxManager$/, 'TxManagerType');
          return b.runs && known?.value !== undefined
            ? `const ${d.name}: ${type} = ${known.value.replace(/new TxManager\(/, 'new TxManagerClass(')};`
            : `declare const ${d.name}: ${type};`;
        }),
      ].filter(Boolean);
      code = `${prelude.join('\n')}\n${code}`;
    }
    writeFileSync(join(work, `${b.name}.ts`), `${code}\nexport {};\n`);
  }
  // TypeScript skips the semantic checks of the whole program when any file has a syntax error: files
  // with syntax errors are reported from a first pass and left out of a second one.
  const compile = (files: readonly string[]) => {
    writeFileSync(
      join(work, 'tsconfig.pass.json'),
      JSON.stringify({ extends: './tsconfig.json', include: [], files }),
    );
    const r = spawnSync(
      process.execPath,
      [TSC, '-p', join(work, 'tsconfig.pass.json'), '--pretty', 'false'],
      {
        encoding: 'utf8',
      },
    );
    const found = new Map<string, string>();
    for (const line of r.stdout.split('\n')) {
      const m = /([^/\\(]+)\.ts\(\d+,\d+\): error TS(\d+)/.exec(line);
      if (!m?.[1]) continue;
      found.set(m[1], `${found.get(m[1]) ?? ''}${line}\n`);
    }
    return found;
  };
  const all = blocks.map((b) => `${b.name}.ts`);
  const first = compile(all);
  const syntax = new Set([...first].filter(([, text]) => /error TS1\d{3}:/.test(text)).map(([name]) => name));
  for (const name of syntax) errors.set(name, first.get(name) ?? '');
  for (const [name, text] of compile(all.filter((f) => !syntax.has(f.replace(/\.ts$/, '')))))
    errors.set(name, text);
  return errors;
}

const DIST = join(ROOT, 'dist', 'index.js');
if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
const main = Object.keys(await import('pg-txkit'));
const testing = Object.keys(await import('pg-txkit/testing'));
const diagnostics = setUpProject({ main, testing });
const runnable = blocks.filter((b) => b.runs);

function run(file: string, databaseUrl: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], {
      cwd: work,
      env: { ...process.env, DATABASE_URL: databaseUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c) => (output += c));
    child.stderr.on('data', (c) => (output += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

describe(`documentation snippets: ${blocks.length} ts blocks compile, ${runnable.length} run`, () => {
  it('finds the blocks', () => {
    expect(blocks.length).toBeGreaterThan(20);
  });

  it.each(blocks.map((b) => [b.where, b] as const))(
    '%s compiles under strict against the built package',
    (_where, b) => {
      expect(diagnostics.get(b.name) ?? '').toBe('');
    },
  );

  it.concurrent.each(runnable.map((b) => [b.where, b] as const))(
    '%s runs against PostgreSQL',
    async (_where, b) => {
      const db = await createTestDatabase(serverUrl(), { prefix: 'snippet' });
      try {
        const r = await run(join(work, 'out', `${b.name}.js`), db.url);
        expect(r.code, r.output).toBe(0);
      } finally {
        await db.drop();
      }
    },
    90_000,
  );
});
