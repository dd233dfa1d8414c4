#!/usr/bin/env node
// The API reference (`npm run docs`): Markdown pages built by API Documenter from the doc models that
// scripts/api-report.mjs writes (one per entry point of package.json's exports), in
// build/api-reference/<entry>/, with an index page. Run after `npm run build && npm run api:check`
// (`npm run docs` does both). The doc comments are the source: api:check already failed on an export
// without one and on a {@link} that resolves to nothing.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const MODELS = join(ROOT, 'build', 'api-model');
const OUT = join(ROOT, 'build', 'api-reference');
const listFile = join(MODELS, 'entry-points.json');
if (!existsSync(listFile)) {
  console.error('no doc model: run `npm run build && npm run api:check` first (or `npm run docs`)');
  process.exit(1);
}
const documenter = join(ROOT, 'node_modules', '@microsoft', 'api-documenter', 'bin', 'api-documenter');
const entries = JSON.parse(readFileSync(listFile, 'utf8'));
rmSync(OUT, { recursive: true, force: true });
mkdirSync(OUT, { recursive: true });
for (const { importPath, fileName } of entries) {
  execFileSync(
    process.execPath,
    [documenter, 'markdown', '-i', join(MODELS, fileName), '-o', join(OUT, fileName)],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  console.log(`${importPath}: build/api-reference/${fileName}/index.md`);
}
writeFileSync(
  join(OUT, 'index.md'),
  `# pg-txkit API reference\n\nOne section per entry point (generated from the doc comments by \`npm run docs\`):\n\n${entries
    .map(({ importPath, fileName }) => `- [\`${importPath}\`](${fileName}/index.md)`)
    .join('\n')}\n`,
);
console.log('build/api-reference/index.md');
