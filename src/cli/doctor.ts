import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type LockReport, lockReport } from '../diagnostics/lock-report.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, isConnectFailure, oneLine, safeUrl } from './connection.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { renderLockReport } from './render-lock-report.js';
import { createStyle } from './style.js';

/** Options of the `doctor` command. */
export interface DoctorOptions {
  readonly url: string;
  readonly json: boolean;
  /** Refresh every this many seconds until Ctrl-C; undefined for a single report. */
  readonly watchSeconds: number | undefined;
  readonly idleInTransactionMs: number;
  readonly longWaitMs: number;
  readonly redact: boolean;
  readonly allDatabases: boolean;
}

/**
 * Serializes a lock report (or anything holding bigints and dates) to JSON: bigints become decimal
 * strings, dates ISO strings.
 *
 * @example
 * io.stdout.write(toJson(report));
 */
export function toJson(value: unknown): string {
  return `${JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`;
}

/**
 * `pg-txkit doctor`: a lock report as an indented tree (or JSON), root blockers first, with suggested
 * actions; `--watch` refreshes until Ctrl-C. Exit code 0 when healthy, 1 with findings, 3 when the
 * server cannot be reached.
 *
 * @example
 * const code = await runDoctor({ url, json: true, watchSeconds: undefined, idleInTransactionMs: 30000,
 *   longWaitMs: 5000, redact: false, allDatabases: false }, io);
 */
export async function runDoctor(options: DoctorOptions, io: CliIo): Promise<ExitCode> {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: 1,
    application_name: 'pg-txkit doctor',
    connectionTimeoutMillis: 10_000,
    // The doctor must never become part of the problem: its own statements give up quickly.
    statement_timeout: 10_000,
    lock_timeout: 1_000,
  });
  pool.on('error', () => {});
  const style = createStyle(io.stdout, io.env);
  try {
    for (let round = 0; ; round++) {
      const report = await take(pool, options);
      if (options.json) io.stdout.write(toJson(report));
      else {
        if (options.watchSeconds !== undefined && io.stdout.isTTY) io.stdout.write('\x1b[2J\x1b[H');
        else if (round > 0) io.stdout.write('\n');
        io.stdout.write(`${renderLockReport(report, style)}\n`);
      }
      if (options.watchSeconds === undefined) return report.healthy ? EXIT.ok : EXIT.findings;
      try {
        await sleep(options.watchSeconds * 1000, undefined, { signal: io.signal });
      } catch {
        return EXIT.interrupted;
      }
    }
  } finally {
    await pool.end();
  }
}

async function take(pool: pg.Pool, options: DoctorOptions): Promise<LockReport> {
  let result: Awaited<ReturnType<typeof lockReport>>;
  try {
    result = await lockReport(pool, {
      idleInTransactionMs: options.idleInTransactionMs,
      longWaitMs: options.longWaitMs,
      redact: options.redact,
      allDatabases: options.allDatabases,
    });
  } catch (error) {
    throw isConnectFailure(error)
      ? new ConnectError(`cannot connect to ${safeUrl(options.url)}: ${oneLine(error)}`)
      : error;
  }
  if (result.isErr()) {
    const cause = result.error.cause ?? result.error;
    if (isConnectFailure(cause) || result.error.kind === 'ConnectionLost') {
      throw new ConnectError(`cannot connect to ${safeUrl(options.url)}: ${oneLine(cause)}`);
    }
    throw result.error;
  }
  return result.value;
}
