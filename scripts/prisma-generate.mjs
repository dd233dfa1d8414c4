// Generates the Prisma client of the test suite (test/fixtures/query-builders/prisma/schema.prisma)
// into its gitignored ./generated folder, so a fresh clone needs nothing but `npm ci` and `npm test`.
// Prisma recommends generating rather than committing the client (it is build output of the schema and
// of the installed prisma version). Skipped when the client was generated from the same schema by the
// same prisma version. Run by `npm run typecheck` (pretypecheck) and by the tests' global setup.
//
// `prisma generate` of the engine-less `prisma-client` generator needs no schema engine, but the CLI
// insists on one and would download it (this project's CI has only the npm registry): any executable
// given as PRISMA_SCHEMA_ENGINE_BINARY satisfies it, and no-schema-engine.mjs says so if ever run.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const schema = `${root}test/fixtures/query-builders/prisma/schema.prisma`;
const stamp = `${root}test/fixtures/query-builders/prisma/generated/.stamp`;
const require = createRequire(import.meta.url);
const version = require('prisma/package.json').version;
const want = createHash('sha256').update(version).update(readFileSync(schema)).digest('hex');

if (existsSync(stamp) && readFileSync(stamp, 'utf8') === want) process.exit(0);

const result = spawnSync(
  process.execPath,
  [require.resolve('prisma/build/index.js'), 'generate', '--schema', schema],
  {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      PRISMA_SCHEMA_ENGINE_BINARY:
        process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? `${root}scripts/no-schema-engine.mjs`,
      PRISMA_HIDE_UPDATE_MESSAGE: '1',
    },
  },
);
if (result.status !== 0) {
  process.stderr.write(result.stdout);
  process.stderr.write(result.stderr);
  process.exit(result.status ?? 1);
}
writeFileSync(stamp, want);
