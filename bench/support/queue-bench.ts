// What the queue benchmarks share (bench/queue.ts, bench/queue-steady.ts): where the worker process and
// the /proc reader live, the server CPU reader, quantiles and number formatting, the standalone run.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type pg from 'pg';
import type { BenchModule } from '../../src/cli/bench.js';
import { type StartPostgresOptions, startPostgres } from '../../src/testing/start-postgres.js';
import { createTestDatabase } from '../../src/testing/test-database.js';

/**
 * A file of bench/queue/, found from the sources (bench/support/) or from the build
 * (dist-bench/bench/support/).
 *
 * @example
 * fork(benchFile('child.mjs'));
 */
export function benchFile(name: string): string {
  for (const candidate of [`../queue/${name}`, `../../../bench/queue/${name}`]) {
    const path = fileURLToPath(new URL(candidate, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error(`bench/queue/${name} not found`);
}

/** The server CPU reader the queue benchmarks share (bench/queue/server-cpu.mjs). */
export type ServerCpuReader = (pool: pg.Pool) => Promise<() => number | undefined>;

/**
 * Loads bench/queue/server-cpu.mjs: a reader of the local server's CPU µs so far (the postmaster with
 * its exited children plus its live backends, from /proc), or one returning undefined for a remote server.
 *
 * @example
 * const serverCpu = await (await loadServerCpuReader())(pool);
 */
export async function loadServerCpuReader(): Promise<ServerCpuReader> {
  const mod: { serverCpuReader: ServerCpuReader } = await import(
    pathToFileURL(benchFile('server-cpu.mjs')).href
  );
  return mod.serverCpuReader;
}

/**
 * The `q`-quantile of `values` (the value at rank floor(q·n), q = 1 the maximum); NaN when empty.
 *
 * @example
 * quantile([5, 1, 3], 0.5); // 3
 */
export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

/**
 * The median of `values` (the upper one of an even count).
 *
 * @example
 * median([3, 1, 2]); // 2
 */
export const median = (values: readonly number[]) => quantile(values, 0.5);

/**
 * `n` with thousands separators and at most `digits` decimals; 'n/a' for undefined or NaN.
 *
 * @example
 * fmt(51_900.4); // '51,900'
 */
export const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n) ? 'n/a' : n.toLocaleString('en-US', { maximumFractionDigits: digits });

/**
 * `median (min–max)` of `values`, formatted with {@link fmt}.
 *
 * @example
 * spread([3, 1, 2]); // '2 (1–3)'
 */
export const spread = (values: readonly number[], digits = 0) =>
  values.length === 0
    ? 'n/a'
    : `${fmt(median(values), digits)} (${fmt(Math.min(...values), digits)}–${fmt(Math.max(...values), digits)})`;

/**
 * `items` cut into arrays of at most `size`.
 *
 * @example
 * chunks([1, 2, 3], 2); // [[1, 2], [3]]
 */
export const chunks = <T>(items: readonly T[], size: number): T[][] =>
  Array.from({ length: Math.ceil(items.length / size) }, (_, i) => items.slice(i * size, (i + 1) * size));

/**
 * Runs a benchmark module's `run` on its own when `moduleUrl` is the script node was started with
 * (`node dist-bench/bench/queue.js`): an embedded PostgreSQL started with `server`'s options, a fresh
 * database, progress on stderr; both dropped at the end.
 *
 * @example
 * await runStandalone(import.meta.url, run, {});
 */
export async function runStandalone(
  moduleUrl: string,
  run: BenchModule['run'],
  server: StartPostgresOptions,
): Promise<void> {
  if (process.argv[1] === undefined || moduleUrl !== pathToFileURL(process.argv[1]).href) return;
  const started = await startPostgres(server);
  const db = await createTestDatabase(started.url, { prefix: 'bench' });
  try {
    await run({
      url: db.url,
      durationMs: 0,
      onProgress: (done, total) => process.stderr.write(`${done}/${total}\r`),
      signal: new AbortController().signal,
    });
  } finally {
    await db.drop().catch(() => {});
    await started.stop();
  }
}
