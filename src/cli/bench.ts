import { setMaxListeners } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type StartedPostgres, startPostgres } from '../testing/start-postgres.js';
import { createTestDatabase } from '../testing/test-database.js';
import { durationSchema } from '../tx/duration.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, oneLine, parseConnectionUrl, UsageError } from './connection.js';
import { toJson } from './doctor.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { loadModules } from './load-modules.js';
import { ProgressBar } from './progress-bar.js';
import { type BenchResult, renderRatioChart } from './render-ratio-chart.js';
import { renderTable } from './render-table.js';
import { stopServer } from './stop-server.js';

/** What a benchmark module (`bench/<name>.ts`, compiled) exports. */
export interface BenchModule {
  /** Optional name (default: the file name without `.bench.js` / `.js`). */
  readonly name?: string;
  run(context: {
    readonly url: string;
    readonly durationMs: number;
    onProgress(done: number, total: number): void;
    readonly signal: AbortSignal;
  }): Promise<BenchResult>;
}

/** Options of the `bench` command. */
export interface BenchOptions {
  readonly url: string | undefined;
  readonly only: readonly string[] | undefined;
  readonly durationMs: number;
  /** Path of the JSON results. */
  readonly out: string;
  /** Path of the SVG chart (default: `out` with .svg). */
  readonly svg: string | undefined;
  /** Folder of compiled benchmark modules (default: `<package>/dist-bench/bench`). */
  readonly dir: string | undefined;
  readonly json: boolean;
}

/**
 * The default folder of compiled benchmarks: `<repository>/dist-bench/bench`. The benchmarks are a
 * repository tool (`npm run bench`), not part of the published package: this file is compiled by
 * `npm run build:bench` into `dist-bench/src/cli/bench.js`, beside `dist-bench/bench/`.
 *
 * @example
 * defaultBenchDir(); // → '/path/to/pg-txkit/dist-bench/bench/'
 */
export function defaultBenchDir(): string {
  // dist-bench/src/cli/bench.js → dist-bench/bench/; src/cli/bench.ts → <repository>/dist-bench/bench/.
  const up = import.meta.url.endsWith('.ts') ? '../../dist-bench/bench/' : '../../bench/';
  return fileURLToPath(new URL(up, import.meta.url));
}

function benchName(file: string, mod: BenchModule): string {
  return mod.name ?? basename(file).replace(/(\.bench)?\.m?[jt]s$/, '');
}

/**
 * `npm run bench`: runs every benchmark module (each on a fresh database) with a progress bar, prints
 * the ratio tables, writes the JSON results and an SVG chart of the ratios.
 *
 * @example
 * await runBench({ url: undefined, only: undefined, durationMs: 3000, out: 'bench-results.json',
 *   svg: undefined, dir: undefined, json: false }, io);
 */
export async function runBench(options: BenchOptions, io: CliIo): Promise<ExitCode> {
  const err = (line: string) => io.stderr.write(`${line}\n`);
  const dir = options.dir ?? defaultBenchDir();
  const { items, problems } = await loadModules(
    dir,
    (mod) => (typeof mod.run === 'function' ? (mod as unknown as BenchModule) : undefined),
    { typescript: import.meta.url.endsWith('.ts') },
  );
  // Modules without run() are helpers and stay silent; a module that fails to import is reported.
  for (const p of problems) if (p.kind === 'import') err(`warning: skipped ${p.file}: ${p.reason}`);
  const benches = items.map((i) => ({ name: benchName(i.file, i.value), module: i.value }));
  if (benches.length === 0) {
    throw new UsageError(
      `no benchmark modules in ${dir} (build them first: npm run build:bench; each exports run({ url, durationMs, onProgress }))`,
    );
  }
  if (options.only) {
    const names = new Set(benches.map((b) => b.name));
    const unknown = options.only.filter((n) => !names.has(n));
    if (unknown.length > 0) {
      throw new UsageError(`unknown benchmark(s) ${unknown.join(', ')}; available: ${[...names].join(', ')}`);
    }
  }
  const selected = options.only ? benches.filter((b) => options.only?.includes(b.name)) : benches;

  let server: StartedPostgres;
  try {
    if (options.url === undefined) err('starting PostgreSQL…');
    server = await startPostgres(options.url === undefined ? {} : { provider: 'url', url: options.url });
    io.onServerStarted?.();
    err(`PostgreSQL ${server.version} (${server.provider})`);
  } catch (error) {
    throw new ConnectError(`cannot start or reach PostgreSQL: ${oneLine(error)}`);
  }
  const results: BenchResult[] = [];
  const failures: { name: string; error: string }[] = [];
  try {
    for (const bench of selected) {
      if (io.signal.aborted) break;
      const bar = new ProgressBar(io.stderr, bench.name);
      const benchSignal = AbortSignal.any([io.signal]);
      setMaxListeners(10_000, benchSignal); // many workers may listen to it

      const db = await createTestDatabase(server.url, { prefix: 'bench' });
      try {
        const result = await bench.module.run({
          url: db.url,
          durationMs: options.durationMs,
          onProgress: (done, total) => bar.update(done, total),
          signal: benchSignal,
        });
        results.push(result);
        bar.done('done');
      } catch (error) {
        if (io.signal.aborted) {
          bar.done('interrupted');
          break;
        }
        failures.push({ name: bench.name, error: oneLine(error) });
        bar.done(`failed: ${oneLine(error)}`);
      } finally {
        await db.drop().catch(() => {});
      }
    }
  } finally {
    await stopServer(server);
  }

  const document = {
    generatedAt: new Date().toISOString(),
    server: { version: server.version, provider: server.provider },
    durationMs: options.durationMs,
    results,
    failures,
  };
  const svgPath = options.svg ?? options.out.replace(/(\.json)?$/, '.svg');
  await writeFile(options.out, toJson(document));
  await writeFile(svgPath, renderRatioChart(results));
  if (options.json) io.stdout.write(toJson(document));
  else {
    for (const r of results) {
      io.stdout.write(
        `\n${r.name} (ratio to ${r.baseline})\n${renderTable(
          [{ header: 'variant' }, { header: 'ops/s', align: 'right' }, { header: 'ratio', align: 'right' }],
          r.rows.map((row) => [row.name, row.opsPerSec.toFixed(0), `${row.ratio.toFixed(2)}×`]),
        )}\n${r.notes ? `${r.notes}\n` : ''}`,
      );
    }
    for (const f of failures) io.stdout.write(`\n${f.name}: FAILED: ${f.error}\n`);
    io.stdout.write(`\nwrote ${options.out} and ${svgPath}\n`);
  }
  if (io.signal.aborted) return EXIT.interrupted;
  return failures.length > 0 ? EXIT.failure : EXIT.ok;
}

const BENCH_USAGE = `Usage: npm run bench -- [options]

Runs the benchmarks of bench/ (compiled by npm run build:bench), prints ratio tables, writes JSON
results and an SVG chart.

Options:
  --url <conn>       use this server instead of starting one (or $DATABASE_URL)
  --only <names>     comma-separated benchmark names
  --duration <ms>    measuring time per variant (default 3000; also '2s')
  --out <file>       JSON results file (default bench-results.json)
  --svg <file>       SVG chart file (default: the --out name with .svg)
  --dir <folder>     folder of compiled benchmark modules (default dist-bench/bench)
  --json             print the results as JSON
  -h, --help         this text
`;

/**
 * Parses the arguments of `npm run bench -- …` into {@link BenchOptions}; `'help'` for `--help`.
 * Throws {@link UsageError} for an unknown option or a bad value.
 *
 * @example
 * parseBenchArgs(['--only', 'queue', '--duration', '2s'], {}); // → { only: ['queue'], durationMs: 2000, … }
 */
export function parseBenchArgs(argv: readonly string[], env: CliIo['env']): BenchOptions | 'help' {
  let values: ReturnType<typeof parseBenchArgv>;
  try {
    values = parseBenchArgv(argv);
  } catch (error) {
    throw new UsageError(oneLine(error));
  }
  if (values.help === true) return 'help';
  const duration = values.duration ?? '3000';
  const parsed = durationSchema.safeParse(/^\d+$/.test(duration) ? Number(duration) : duration);
  if (!parsed.success || parsed.data <= 0) {
    throw new UsageError("invalid --duration: expected a duration such as 500, '500ms', '2s'");
  }
  const only = values.only
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (only?.length === 0) throw new UsageError('invalid --only: expected a comma-separated list');
  const url = values.url ?? env.DATABASE_URL;
  return {
    url:
      url === undefined
        ? undefined
        : parseConnectionUrl(url, values.url === undefined ? 'DATABASE_URL' : '--url'),
    only,
    durationMs: parsed.data,
    out: values.out ?? 'bench-results.json',
    svg: values.svg,
    dir: values.dir,
    json: values.json === true,
  };
}

function parseBenchArgv(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      url: { type: 'string' },
      only: { type: 'string' },
      duration: { type: 'string' },
      out: { type: 'string' },
      svg: { type: 'string' },
      dir: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  }).values;
}

/**
 * The benchmark runner's command line (`npm run bench -- --only queue`): returns the exit code (see
 * {@link EXIT}) and prints one line on stderr for bad arguments or an unreachable server.
 *
 * @example
 * process.exitCode = await benchMain(process.argv.slice(2), io);
 */
export async function benchMain(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  try {
    const options = parseBenchArgs(argv, io.env);
    if (options === 'help') {
      io.stdout.write(BENCH_USAGE);
      return EXIT.ok;
    }
    return await runBench(options, io);
  } catch (error) {
    if (io.signal.aborted) {
      io.stderr.write('bench: interrupted\n');
      return EXIT.interrupted;
    }
    const code =
      error instanceof UsageError
        ? EXIT.usage
        : error instanceof ConnectError
          ? EXIT.cannotConnect
          : EXIT.failure;
    io.stderr.write(`bench: error: ${oneLine(error)}\n`);
    return code;
  }
}
