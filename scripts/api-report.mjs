#!/usr/bin/env node
// The public surface, pinned: one API report per entry point of package.json's `exports` (api/*.api.md,
// committed), made by API Extractor from the built declarations (dist/). The entry points are read from
// the exports map, so a new subpath export gets its report (and its reference pages) without touching
// this file.
//
//   npm run api:check    (in npm test) fails when a report differs from the committed one (the public
//                        surface changed), when an export or a member of one has no doc comment, or when a
//                        {@link} does not resolve
//   npm run api:report   rewrites api/*.api.md: review the diff, it is the change of the public API
//
// Also writes the doc model (build/api-model/<entry>/*.api.json) that `npm run docs` turns into the
// reference (scripts/api-reference.mjs).
// Needs `npm run build` first. API Extractor brings its own TypeScript (6.0): TypeScript 7's package has
// no compiler API.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Extractor, ExtractorConfig } from '@microsoft/api-extractor';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const update = process.argv.includes('--update');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

/** Every entry point with declarations: `.` → `pg-txkit`, `./testing` → `pg-txkit/testing`, … */
export function entryPoints(manifest = pkg) {
  return Object.entries(manifest.exports)
    .filter(([, target]) => typeof target === 'object' && target !== null && typeof target.types === 'string')
    .map(([subpath, target]) => ({
      importPath: subpath === '.' ? manifest.name : `${manifest.name}/${subpath.slice(2)}`,
      // file names of the report and the doc model: pg-txkit, pg-txkit-testing, …
      fileName: subpath === '.' ? manifest.name : `${manifest.name}-${subpath.slice(2).replaceAll('/', '-')}`,
      types: join(ROOT, target.types),
    }));
}

/** Fails the run: an export or a member of one without a doc comment, a {@link} that resolves to nothing. */
const FAIL = { logLevel: 'error', addToApiReportFile: false };
const IGNORE = { logLevel: 'none', addToApiReportFile: false };

function configFor(entry) {
  // one folder per entry point: API Documenter loads one model per package name, and every entry point
  // of this package has the same name
  const model = join(ROOT, 'build', 'api-model', entry.fileName);
  mkdirSync(model, { recursive: true });
  mkdirSync(join(ROOT, 'build', 'api-report'), { recursive: true });
  return ExtractorConfig.prepare({
    configObjectFullPath: join(ROOT, 'api', `${entry.fileName}.json`),
    packageJsonFullPath: join(ROOT, 'package.json'),
    configObject: {
      projectFolder: ROOT,
      mainEntryPointFilePath: entry.types,
      compiler: {
        overrideTsconfig: {
          compilerOptions: {
            target: 'ES2023',
            module: 'NodeNext',
            moduleResolution: 'NodeNext',
            lib: ['ES2023'],
            types: ['node'],
            strict: true,
            skipLibCheck: true,
          },
          files: [entry.types],
        },
      },
      apiReport: {
        enabled: true,
        reportFileName: `${entry.fileName}.api.md`,
        reportFolder: join(ROOT, 'api'),
        reportTempFolder: join(ROOT, 'build', 'api-report'),
      },
      docModel: { enabled: true, apiJsonFilePath: join(model, `${entry.fileName}.api.json`) },
      dtsRollup: { enabled: false },
      tsdocMetadata: { enabled: false },
      messages: {
        compilerMessageReporting: { default: { logLevel: 'error' } },
        extractorMessageReporting: {
          default: { logLevel: 'warning', addToApiReportFile: true },
          'ae-undocumented': FAIL,
          'ae-unresolved-link': FAIL,
          // no release tags (@public/@beta): every export of an entry point is public
          'ae-missing-release-tag': IGNORE,
        },
        // our doc comments are JSDoc (an untagged example after @example), not strict TSDoc
        tsdocMessageReporting: { default: IGNORE },
      },
    },
  });
}

if (!existsSync(join(ROOT, 'dist', 'index.d.ts'))) {
  console.error('dist/ is missing: run `npm run build` first');
  process.exit(1);
}
mkdirSync(join(ROOT, 'api'), { recursive: true });
let failed = 0;
for (const entry of entryPoints()) {
  const result = Extractor.invoke(configFor(entry), {
    localBuild: update,
    showVerboseMessages: false,
    messageCallback: (message) => {
      if (message.logLevel === 'none') message.handled = true;
    },
  });
  if (!result.succeeded) {
    failed++;
    console.error(
      `${entry.importPath}: ${result.errorCount} error(s), ${result.warningCount} warning(s)` +
        (result.apiReportChanged
          ? ` — the public surface changed: run \`npm run api:report\` and commit api/${entry.fileName}.api.md`
          : ''),
    );
  } else {
    console.log(
      `${entry.importPath}: api/${entry.fileName}.api.md ${result.apiReportChanged ? 'updated' : 'unchanged'}`,
    );
  }
}
// the entry points the reports cover, for the reference and the tests
writeFileSync(
  join(ROOT, 'build', 'api-model', 'entry-points.json'),
  `${JSON.stringify(
    entryPoints().map(({ importPath, fileName }) => ({ importPath, fileName })),
    null,
    2,
  )}\n`,
);
process.exit(failed ? 1 : 0);
