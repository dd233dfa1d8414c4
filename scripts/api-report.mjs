#!/usr/bin/env node
// The public surface, pinned: one API report per entry point of package.json's `exports` (api/*.api.md,
// committed), made by API Extractor from the built declarations (dist/). The entry points are read from
// the exports map, so a new subpath export gets its report (and its reference pages) without touching
// this file.
//
//   node scripts/api-report.mjs           (npm run api:check, in npm test) check: fails when a report differs from the committed one, when
//                                         an export has no doc comment, or when a {@link} does not resolve
//   node scripts/api-report.mjs --update  (npm run api:report) rewrites api/*.api.md (then review and commit the diff)
//
// Also writes the doc model (build/api-model/<entry>/*.api.json) that `npm run docs` turns into the
// reference (scripts/api-reference.mjs).
// Needs `npm run build` first. API Extractor brings its own TypeScript (it cannot use TypeScript 7).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Extractor, ExtractorConfig } from '@microsoft/api-extractor';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const update = process.argv.includes('--update');
/**
 * `--undocumented`: list the members without a doc comment (file:line; the reports mark them too), and
 * compare nothing.
 */
const listMembers = process.argv.includes('--undocumented');
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

/** Fails the run: a {@link} that resolves to nothing. */
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
          // an undocumented member shows in the report (a reviewer sees it); an undocumented export
          // fails the run (checked on the doc model below: API Extractor does not tell them apart)
          'ae-undocumented': listMembers
            ? { logLevel: 'warning', addToApiReportFile: false }
            : { logLevel: 'none', addToApiReportFile: true },
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

/** The top-level exports of a doc model (an entry point's .api.json) that have no doc comment. */
function undocumentedExports(modelFile) {
  const model = JSON.parse(readFileSync(modelFile, 'utf8'));
  const entry = model.members?.[0]?.members ?? [];
  return entry.filter((item) => !item.docComment?.trim()).map((item) => item.name);
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
      if (listMembers && message.messageId === 'ae-undocumented') {
        const where = `${message.sourceFilePath?.replace(`${ROOT}/`, '')}:${message.sourceFileLine}`;
        console.log(`${where} ${message.text}`);
      }
      if (message.logLevel === 'none') message.handled = true;
    },
  });
  const undocumented = undocumentedExports(
    join(ROOT, 'build', 'api-model', entry.fileName, `${entry.fileName}.api.json`),
  );
  for (const name of undocumented) console.error(`${entry.importPath}: export ${name} has no doc comment`);
  if (!result.succeeded || undocumented.length) {
    failed++;
    console.error(
      `${entry.importPath}: ${result.errorCount} error(s), ${result.warningCount} warning(s)` +
        (result.apiReportChanged
          ? ` — the public surface changed: run \`npm run api:report -- --update\` and commit api/${entry.fileName}.api.md`
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
