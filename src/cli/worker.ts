import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type { Logger } from '../observability/logger.js';
import { isPayloadSchema } from '../queue/payload-schema.js';
import { Queue } from '../queue/queue.js';
import type { QueueOptions } from '../queue/queue-types.js';
import type { TaskMap } from '../queue/store/job-store.js';
import type { JobEndEvent, JobHandler } from '../queue/worker/work-options.js';
import { TxManager } from '../tx/tx-manager.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, isConnectFailure, oneLine, safeUrl, UsageError } from './connection.js';
import { EXIT, type ExitCode } from './exit-codes.js';

/** Options of `pg-txkit worker`. */
export interface WorkerCommandOptions {
  readonly url: string;
  /** Path of the module of task handlers (resolved from the working directory). */
  readonly tasks: string;
  readonly concurrency: number;
  /**
   * At stop: how long running handlers may finish, then how long the aborted ones may return (the
   * worker's `graceMs`). A handler still running after both is left to its job's lease.
   */
  readonly graceMs: number;
  /** The queue's schema (overrides the module's `queue.schema`). */
  readonly schema: string | undefined;
  /** Run `migrate()` before working (default true). */
  readonly migrate: boolean;
  /** JSON lines on stdout instead of text on stderr. */
  readonly json: boolean;
}

/** What a tasks module exports (see docs/cli.md, `pg-txkit worker`). */
interface TasksModule {
  readonly tasks: TaskMap;
  readonly handlers: Readonly<Record<string, JobHandler<unknown>>>;
  readonly queue: Readonly<Record<string, unknown>>;
}

/** Loads and checks the tasks module; a problem is a usage error (nothing connects). */
async function loadTasksModule(path: string): Promise<TasksModule> {
  const file = resolve(path);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    throw new UsageError(`cannot load --tasks ${path}: ${oneLine(error)}`);
  }
  const tasks = mod.tasks;
  const handlers = mod.handlers;
  const queue = mod.queue ?? {};
  if (typeof tasks !== 'object' || tasks === null || Object.keys(tasks).length === 0) {
    throw new UsageError(`--tasks ${path}: export 'tasks' (task name → payload schema) is missing or empty`);
  }
  for (const [name, schema] of Object.entries(tasks)) {
    if (!isPayloadSchema(schema))
      throw new UsageError(`--tasks ${path}: tasks.${name} is not a schema (zod or Standard Schema)`);
  }
  if (typeof handlers !== 'object' || handlers === null || Object.keys(handlers).length === 0) {
    // A worker with no handler would migrate, claim nothing and exit 0: a supervisor restarts it in a
    // silent loop.
    throw new UsageError(
      `--tasks ${path}: export 'handlers' (task name → async function) is missing or empty`,
    );
  }
  for (const [name, handler] of Object.entries(handlers)) {
    if (typeof handler !== 'function')
      throw new UsageError(`--tasks ${path}: handlers.${name} is not a function`);
    if (!Object.hasOwn(tasks, name))
      throw new UsageError(`--tasks ${path}: handlers.${name} has no schema in 'tasks'`);
  }
  if (typeof queue !== 'object' || queue === null)
    throw new UsageError(`--tasks ${path}: export 'queue' is not an object`);
  return {
    tasks: tasks as TaskMap,
    handlers: handlers as Record<string, JobHandler<unknown>>,
    queue: queue as Record<string, unknown>,
  };
}

/** The worker's log lines: JSON lines on stdout (`--json`), else `level: message` lines on stderr. */
function cliLogger(io: CliIo, json: boolean): Logger {
  const line = (level: string) => (obj: object, msg?: string) => {
    if (json) {
      const fields: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(obj)) fields[k] = v instanceof Error ? oneLine(v) : v;
      io.stdout.write(`${JSON.stringify({ level, time: new Date().toISOString(), msg, ...fields })}\n`);
    } else {
      io.stderr.write(`${level}: ${msg ?? JSON.stringify(obj)}\n`);
    }
  };
  return { error: line('error'), warn: line('warn'), info: line('info'), debug: () => {} };
}

/** How long the pool's end waits for a client that a handler left running still holds. */
const LEFT_RUNNING_WAIT_MS = 1000;

/** `pool.end()`, waited for at most `ms`. */
async function endPool(pool: pg.Pool, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  await Promise.race([pool.end(), bound]);
  clearTimeout(timer);
}

/**
 * `pg-txkit worker`: runs a queue's worker from a module of task handlers until SIGTERM or Ctrl-C, then
 * stops gracefully (running handlers finish, unstarted jobs go back) and exits 0. A handler that
 * ignores its abort signal past the grace is left running with its job leased; the process exits
 * anyway (bin/pg-txkit.js), so the handler ends with it and the job comes back when its lease lapses.
 * Exit 2 for a module or
 * options that cannot work (nothing connects), 3 when the server cannot be reached, 4 when migrate fails.
 *
 * @example
 * process.exitCode = await runWorker({ url, tasks: './tasks.js', concurrency: 8, graceMs: 10_000, schema: undefined, migrate: true, json: true }, io);
 */
export async function runWorker(options: WorkerCommandOptions, io: CliIo): Promise<ExitCode> {
  const mod = await loadTasksModule(options.tasks);
  const log = cliLogger(io, options.json);
  const pool = new pg.Pool({ connectionString: options.url, max: options.concurrency + 2 });
  pool.on('error', () => {}); // an idle client's error: the next query reports it
  try {
    let queue: Queue;
    try {
      const queueOptions = {
        ...mod.queue,
        pool,
        txManager: new TxManager(pool),
        tasks: mod.tasks,
        logger: log,
        ...(options.schema === undefined ? {} : { schema: options.schema }),
      } as QueueOptions<TaskMap>;
      queue = new Queue(queueOptions);
    } catch (error) {
      throw new UsageError(`--tasks ${options.tasks}: invalid queue options: ${oneLine(error)}`);
    }
    if (options.migrate) {
      const migrated = await queue.migrate();
      if (migrated.isErr()) {
        const e = migrated.error;
        if (isConnectFailure(e) || isConnectFailure(e.cause) || e.kind === 'ConnectionLost')
          throw new ConnectError(`cannot connect to ${safeUrl(options.url)}: ${oneLine(e.cause ?? e)}`);
        log.error({ err: e }, `migrate failed: ${oneLine(e)}`);
        return EXIT.failure;
      }
    }
    const worker = queue.work(mod.handlers, {
      concurrency: options.concurrency,
      graceMs: options.graceMs,
      signal: io.signal,
      hooks: {
        onJobEnd: (e: JobEndEvent) =>
          log.info(
            { event: 'job', task: e.job.task, id: e.job.id, outcome: e.outcome, durationMs: e.durationMs },
            `${e.job.task} ${e.job.id} ${e.outcome}`,
          ),
      },
    });
    log.info(
      {
        event: 'started',
        schema: queue.schema,
        tasks: Object.keys(mod.handlers),
        concurrency: options.concurrency,
      },
      `worker started on ${queue.schema}: ${Object.keys(mod.handlers).join(', ')}`,
    );
    await worker.done;
    log.info({ event: 'stopped', counters: worker.counters }, 'worker stopped');
    return EXIT.ok;
  } finally {
    // Ends the idle clients at once; pool.end() then waits for any client still checked out, which after
    // stop() can only be held by a handler the worker left running (its job left to its lease). That one
    // is not waited for: the process exits (bin/pg-txkit.js) and the handler ends with it.
    await endPool(pool, LEFT_RUNNING_WAIT_MS);
  }
}
