import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { runIsolationSpec } from '../testing/run-isolation-spec.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, isConnectFailure, oneLine, safeUrl, UsageError } from './connection.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { unifiedDiff } from './isolation-diff.js';

/** Options of the `isolation` command. */
export interface IsolationOptions {
  readonly url: string;
  /** Path of the `.spec` file. */
  readonly spec: string;
  /** Path of an expected `.out` file to compare the output with. */
  readonly expected: string | undefined;
  /** Connect as PostgreSQL's harness does (its startup settings): `--pg-regress-settings`. */
  readonly regressSettings?: boolean;
}

async function readText(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read the ${what} ${path}: ${oneLine(error)}`);
  }
}

/**
 * `pg-txkit isolation <file.spec>`: runs a PostgreSQL isolation test specification against `--url`
 * the way PostgreSQL's isolationtester does and prints its output (streamed as it runs). With
 * `--expected file.out` it prints nothing but a unified diff from the expected output, and exits 1
 * when they differ. Connections are named `isolation/<file name>/<session>`, as PostgreSQL's harness
 * names them; `--pg-regress-settings` adds its startup settings (datestyle, timezone, intervalstyle).
 * Exit codes: 0 ran (and matched), 1 differs, 2 a spec the isolation tester would refuse (line number
 * on stderr) or one without permutation lines and too many interleavings, 3 cannot connect, 4 a setup
 * failed or a step timed out.
 *
 * @example
 * const code = await runIsolation({ url, spec: 'skip-locked.spec', expected: 'skip-locked.out' }, io);
 */
export async function runIsolation(options: IsolationOptions, io: CliIo): Promise<ExitCode> {
  const specText = await readText(options.spec, 'spec file');
  const expected =
    options.expected === undefined ? undefined : await readText(options.expected, 'expected output');
  // the test's name as pg_isolation_regress gives it: the spec file's name
  const testName =
    basename(options.spec)
      .replace(/\.spec$/, '')
      .slice(0, 40) || 'spec';
  const run = await runIsolationSpec(options.url, specText, {
    testName,
    regressSettings: options.regressSettings ?? false,
    ...(expected === undefined ? { onOutput: (text: string) => io.stdout.write(text) } : {}),
  });
  if (run.isErr()) {
    const error = run.error;
    if (error.kind === 'SpecSyntaxError' || error.kind === 'SpecTooManyPermutations') {
      io.stderr.write(`pg-txkit: ${options.spec}: ${error.message}\n`);
      return EXIT.usage;
    }
    if (error.kind === 'SpecRunError' && error.permutation < 0 && isConnectFailure(error.cause)) {
      throw new ConnectError(`cannot connect to ${safeUrl(options.url)}: ${oneLine(error.cause)}`);
    }
    if (expected !== undefined && error.kind === 'SpecRunError') io.stdout.write(error.output);
    io.stderr.write(`pg-txkit: ${options.spec}: ${error.message}\n`);
    return EXIT.failure;
  }
  for (const warning of run.value.warnings) io.stderr.write(`pg-txkit: ${options.spec}: ${warning}\n`);
  if (expected === undefined) return EXIT.ok;
  const diff = unifiedDiff(
    expected,
    run.value.output,
    options.expected ?? 'expected',
    `${options.spec} (actual)`,
  );
  if (diff === '') {
    io.stderr.write(
      `pg-txkit: ${options.spec}: ${run.value.permutations} permutations, output as expected\n`,
    );
    return EXIT.ok;
  }
  io.stdout.write(diff);
  return EXIT.findings;
}
