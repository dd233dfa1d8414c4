import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type HorizonHolder, horizonHolders } from '../diagnostics/horizon.js';
import { type LockReport, lockReport } from '../diagnostics/lock-report.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, isConnectFailure, oneLine, safeUrl } from './connection.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { findQueueSchemas, type QueueHealth, queueHealth } from './queue-health-report.js';
import { renderLockReport } from './render-lock-report.js';
import { renderQueueHealth } from './render-queue-health.js';
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
  /** Queue schemas to report on; undefined: every schema holding a pg-txkit queue. */
  readonly queueSchemas?: readonly string[] | undefined;
  /** The oldest ready job older than this (ms) is a finding. Default 5 min. */
  readonly queueLagMs?: number | undefined;
  /** Report the queues' health beside the lock report (`--no-queues`: false). Default true. */
  readonly queues?: boolean | undefined;
  /**
   * A session or prepared transaction holding the MVCC horizon back this long (ms) is a finding of every
   * queue (with the dead tuples its table holds meanwhile). Default 1 min.
   */
  readonly horizonAgeMs?: number | undefined;
}

/**
 * A replication slot whose xmin is this many transaction ids old is a finding (a slot keeps no time): at
 * 2,000 jobs/s a queue assigns some 2,000 transaction ids a second, so this is under a minute of its work.
 */
const HORIZON_SLOT_XIDS = 100_000;

/**
 * What `doctor --json` prints: the lock report, the queues' health and what holds the MVCC horizon back
 * (no `queues` or `horizon` key with `--no-queues`).
 */
export type DoctorReport = LockReport & {
  readonly queues?: readonly QueueHealth[];
  readonly horizon?: readonly HorizonHolder[];
};

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
 * actions, and beside it the health of each pg-txkit queue (depth by state, oldest ready age, dead
 * jobs, expired leases, dead tuples); `--watch` refreshes until Ctrl-C. Exit code 0 when healthy, 1 with findings, 3 when the
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
      const horizon =
        options.queues === false ? undefined : await connected(options.url, () => horizonOf(pool, options));
      const queues =
        horizon === undefined
          ? undefined
          : await connected(options.url, () => queuesOf(pool, options, horizon));
      const healthy = report.healthy && (queues ?? []).every((q) => q.findings.length === 0);
      if (options.json)
        io.stdout.write(
          toJson((queues && horizon ? { ...report, queues, horizon } : report) satisfies DoctorReport),
        );
      else {
        if (options.watchSeconds !== undefined && io.stdout.isTTY) io.stdout.write('\x1b[2J\x1b[H');
        else if (round > 0) io.stdout.write('\n');
        const queueTable = queues ? `\n${renderQueueHealth(queues, style, horizon ?? [])}\n` : '';
        io.stdout.write(`${renderLockReport(report, style)}\n${queueTable}`);
      }
      if (options.watchSeconds === undefined) return healthy ? EXIT.ok : EXIT.findings;
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

/** Runs `read`, turning a connection failure into the doctor's ConnectError. */
async function connected<T>(url: string, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (error) {
    const cause = (error as { cause?: unknown }).cause ?? error;
    if (
      isConnectFailure(error) ||
      isConnectFailure(cause) ||
      (error as { kind?: unknown }).kind === 'ConnectionLost'
    ) {
      throw new ConnectError(`cannot connect to ${safeUrl(url)}: ${oneLine(cause)}`);
    }
    throw error;
  }
}

/** What holds the horizon back longer than the doctor's threshold. */
async function horizonOf(pool: pg.Pool, options: DoctorOptions): Promise<HorizonHolder[]> {
  const holders = await horizonHolders(pool, {
    minAgeMs: options.horizonAgeMs ?? 60_000,
    minXidAge: HORIZON_SLOT_XIDS,
    redact: options.redact,
  });
  if (holders.isErr()) throw holders.error;
  return holders.value;
}

/** The queues to report on: the ones named, each checked to hold a queue, else every one found. */
async function queuesOf(
  pool: pg.Pool,
  options: DoctorOptions,
  holders: readonly HorizonHolder[],
): Promise<QueueHealth[]> {
  const found = await findQueueSchemas(pool);
  const named = options.queueSchemas;
  const missing = named?.filter((s) => !found.includes(s)) ?? [];
  if (missing.length > 0) {
    throw new Error(
      `no pg-txkit queue in schema ${missing.join(', ')} (queues found: ${found.join(', ') || 'none'})`,
    );
  }
  return queueHealth(pool, named ?? found, { lagMs: options.queueLagMs ?? 300_000, cap: 10_000, holders });
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
