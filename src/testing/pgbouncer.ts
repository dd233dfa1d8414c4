import { type ChildProcess, spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, chmod, chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { z } from 'zod/v4';
import { freePort } from './postmaster.js';

/** Where the Debian package installs the binary (also searched on PATH). */
const DEFAULT_BINARIES = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'];

/**
 * Environment variable naming the pgbouncer binary to use. When set, it is the only place looked at:
 * `PG_TXKIT_PGBOUNCER=/nonexistent npm test` behaves as on a machine without pgbouncer.
 */
export const PGBOUNCER_BINARY_ENV = 'PG_TXKIT_PGBOUNCER';

/**
 * The places {@link findPgBouncer} looks at, in order: `binary` when given, else
 * `$PG_TXKIT_PGBOUNCER` when set, else the Debian paths and then every PATH entry.
 *
 * @example
 * pgBouncerCandidates(undefined, { PG_TXKIT_PGBOUNCER: '/opt/pgbouncer/bin/pgbouncer' }); // → ['/opt/pgbouncer/bin/pgbouncer']
 */
export function pgBouncerCandidates(
  binary: string | undefined,
  env: Readonly<Record<string, string | undefined>> = process.env,
): string[] {
  if (binary) return [binary];
  const fromEnv = env[PGBOUNCER_BINARY_ENV];
  if (fromEnv) return [fromEnv];
  return [
    ...DEFAULT_BINARIES,
    ...(env.PATH ?? '')
      .split(delimiter)
      .filter(Boolean)
      .map((dir) => join(dir, 'pgbouncer')),
  ];
}

/** The `pgbouncer` binary was not found. */
export class PgBouncerNotInstalled extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'PgBouncerNotInstalled';
  constructor(searched: readonly string[]) {
    super(
      `pgbouncer is not installed (looked for ${searched.join(', ')} and on PATH). ` +
        'Install it: `sudo apt-get install -y pgbouncer` (Debian/Ubuntu; then `sudo service pgbouncer stop`), ' +
        '`brew install pgbouncer` (macOS), or pass { binary: "/path/to/pgbouncer" }.',
    );
  }
}

/** PgBouncer did not start or did not accept connections in time; `output` is its log. */
export class PgBouncerStartError extends Error {
  override readonly name = 'PgBouncerStartError';
  readonly output: string;
  constructor(message: string, output: string, options?: ErrorOptions) {
    super(`${message}\n--- pgbouncer output ---\n${output.slice(-4000)}`, options);
    this.output = output;
  }
}

const startPgBouncerOptionsSchema = z
  .object({
    /** Connection string of the PostgreSQL server to pool (its user/password are used for the server side). */
    target: z.string().min(1),
    /** 'transaction' (the mode that breaks session state) or 'session'. */
    poolMode: z.enum(['transaction', 'session', 'statement']),
    /** Server connections per (database, user). Small by default so clients really share backends. */
    poolSize: z.number().int().min(1).max(1000).default(4),
    /** max_client_conn. */
    maxClientConn: z.number().int().min(1).max(10_000).default(200),
    /** Port to listen on (127.0.0.1); 0 (default) picks a free one. */
    port: z.number().int().min(0).max(65535).default(0),
    /** Path of the binary; default: /usr/sbin/pgbouncer, then PATH. */
    binary: z.string().min(1).optional(),
    /** OS user to run as when we are root (pgbouncer refuses to run as root). Default 'postgres'. */
    runAs: z.string().min(1).default('postgres'),
    /** Longest wait for it to accept connections. Default 15 s. */
    startTimeoutMs: z.number().int().min(100).default(15_000),
  })
  .strict();

/** Options of {@link startPgBouncer}. */
export type StartPgBouncerOptions = z.input<typeof startPgBouncerOptionsSchema>;

/** A running PgBouncer. */
export interface StartedPgBouncer {
  /** Connection string through PgBouncer (same database name as the target). */
  readonly url: string;
  /** Its port on 127.0.0.1. */
  readonly port: number;
  /** The pool mode it runs in. */
  readonly poolMode: 'transaction' | 'session' | 'statement';
  /** Stops it and removes its temporary directory. Idempotent. */
  stop(): Promise<void>;
}

/**
 * Finds the pgbouncer binary, or `undefined` when it is not installed.
 *
 * @example
 * if (!(await findPgBouncer())) console.log('apt-get install -y pgbouncer');
 */
export async function findPgBouncer(binary?: string): Promise<string | undefined> {
  for (const candidate of pgBouncerCandidates(binary)) {
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Quotes a value for a libpq-style connect string in pgbouncer.ini (`key='va\'lue'`). */
function connValue(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

async function uidOf(user: string): Promise<{ uid: number; gid: number } | undefined> {
  const { readFile } = await import('node:fs/promises');
  const passwd = await readFile('/etc/passwd', 'utf8').catch(() => '');
  for (const line of passwd.split('\n')) {
    const [name, , uid, gid] = line.split(':');
    if (name === user && uid && gid) return { uid: Number(uid), gid: Number(gid) };
  }
  return undefined;
}

/**
 * Starts a PgBouncer in front of `target` for tests: writes a config into a temp directory
 * (`auth_type = any`: clients are not authenticated; PgBouncer logs in to the server with the target
 * URL's user and password), listens on 127.0.0.1 on a free port, runs the installed binary in the
 * foreground (as `runAs` when we are root — pgbouncer refuses to run as root) and waits until a query
 * goes through. Throws {@link PgBouncerNotInstalled} when the binary is missing.
 *
 * @example
 * const bouncer = await startPgBouncer({ target: url, poolMode: 'transaction' });
 * const pool = new pg.Pool({ connectionString: bouncer.url });
 * // … pool.query(…) goes through transaction pooling …
 * await pool.end();
 * await bouncer.stop();
 */
export async function startPgBouncer(options: StartPgBouncerOptions): Promise<StartedPgBouncer> {
  const o = startPgBouncerOptionsSchema.parse(options);
  const binary = await findPgBouncer(o.binary);
  if (!binary)
    throw new PgBouncerNotInstalled(o.binary ? [o.binary] : pgBouncerCandidates(undefined).slice(0, 3));
  const target = new URL(o.target);
  const port = o.port || (await freePort());
  const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-pgbouncer-'));
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const owner = isRoot ? await uidOf(o.runAs) : undefined;
  if (isRoot && !owner) {
    await rm(dir, { recursive: true, force: true });
    throw new PgBouncerStartError(
      `running as root, and the OS user "${o.runAs}" to run pgbouncer as does not exist`,
      '',
    );
  }
  const user = decodeURIComponent(target.username) || userInfo().username;
  const password = decodeURIComponent(target.password);
  const host = target.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1';
  const serverConn = [
    `host=${connValue(host)}`,
    `port=${target.port || '5432'}`,
    `user=${connValue(user)}`,
    ...(password ? [`password=${connValue(password)}`] : []),
  ].join(' ');
  const ini = [
    '[databases]',
    // Fallback entry: any database name the client asks for, on the target server, as the target's user.
    `* = ${serverConn}`,
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = any',
    `auth_file = ${join(dir, 'userlist.txt')}`,
    `pool_mode = ${o.poolMode}`,
    `default_pool_size = ${o.poolSize}`,
    `max_client_conn = ${o.maxClientConn}`,
    'ignore_startup_parameters = extra_float_digits,options,statement_timeout,lock_timeout,idle_in_transaction_session_timeout',
    `pidfile = ${join(dir, 'pgbouncer.pid')}`,
    'admin_users = pgbouncer',
    'server_reset_query = DISCARD ALL',
    'log_connections = 0',
    'log_disconnections = 0',
    '',
  ].join('\n');
  await writeFile(join(dir, 'pgbouncer.ini'), ini, { mode: 0o600 });
  await writeFile(join(dir, 'userlist.txt'), '"pgbouncer" ""\n', { mode: 0o600 });
  if (owner) {
    for (const file of ['', 'pgbouncer.ini', 'userlist.txt'])
      await chown(join(dir, file), owner.uid, owner.gid);
    await chmod(dir, 0o700);
  }
  const args = [...(isRoot ? ['-u', o.runAs] : []), join(dir, 'pgbouncer.ini')];
  const child: ChildProcess = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => {
    output += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    output += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  // If this process exits without stop() (a crashed or timed-out test run), do not leave pgbouncer behind.
  const killOnExit = (): void => {
    child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      process.removeListener('exit', killOnExit);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGINT'); // immediate shutdown
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      await rm(dir, { recursive: true, force: true });
    })();
    return stopped;
  };
  const via = new URL(o.target);
  via.hostname = '127.0.0.1';
  via.port = String(port);
  const url = via.toString();
  const deadline = Date.now() + o.startTimeoutMs;
  let lastError: unknown;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new PgBouncerStartError(
        `pgbouncer exited during start-up (code ${String(child.exitCode)})`,
        output,
      );
    }
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      break;
    } catch (error) {
      lastError = error;
      await client.end().catch(() => {});
    }
    if (Date.now() > deadline) {
      await stop();
      throw new PgBouncerStartError('pgbouncer did not accept connections in time', output, {
        cause: lastError,
      });
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, port, poolMode: o.poolMode, stop };
}
