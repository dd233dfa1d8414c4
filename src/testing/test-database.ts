import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** A database made for one test file. */
export interface TestDatabase {
  /** Connection string of the new database (same user and server as the admin URL). */
  readonly url: string;
  /** Its name. */
  readonly name: string;
  /**
   * Drops it, cutting any connection still open to it. Idempotent. It first waits, at most 2 s, for the
   * sessions still connected to leave, then terminates the rest: `pool.end()` resolves once its clients
   * were told to end, before their sockets close, and a session cut at that moment would make the ending
   * client emit 57P01 on a pool that no longer listens for errors. (A connection you leaked costs those
   * 2 s, then is cut as before.)
   */
  drop(): Promise<void>;
}

/** Options of {@link createTestDatabase}. */
export interface CreateTestDatabaseOptions {
  /** Template to clone; created on first use with the extension `btree_gist`. Default `pg_txkit_template`. */
  readonly template?: string;
  /** Prefix of the new database's name. Default `t`. */
  readonly prefix?: string;
  /** Migrations to run on the template when this call has to build it (see {@link ensureTemplate}). */
  readonly migrate?: (templateUrl: string) => Promise<void>;
}

/** Extensions installed in the template, so every test database has them. */
export const TEMPLATE_EXTENSIONS = ['btree_gist'] as const;

const DEFAULT_TEMPLATE = 'pg_txkit_template';
/** A fixed advisory key for template creation (a constant: stable across processes and versions). */
const TEMPLATE_LOCK_KEY = '7309452155212718131';
const NAME = /^[a-z_][a-z0-9_]{0,40}$/;
/** How long drop() waits for closing sessions to leave before it terminates them. */
const DROP_GRACE_MS = 2000;

/** Replaces the database of a connection string. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${encodeURIComponent(database)}`;
  return parsed.toString();
}

/** Runs `fn` on a client of its own, ended afterwards (testing-kit internal). */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: 'pg-txkit-testing' });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Options of {@link ensureTemplate}. */
export interface EnsureTemplateOptions {
  /** Name of the template database. Default `pg_txkit_template`. */
  readonly name?: string;
  /**
   * Runs your migrations once, on the template while it is being built (receives its URL), so
   * every test database cloned from it starts migrated. On a long-lived server (`DATABASE_URL`) an
   * existing template is reused as is: put a version or a hash of your migrations in `name`.
   */
  readonly migrate?: (templateUrl: string) => Promise<void>;
}

/**
 * Creates the template database (once; safe when several processes race) with the extensions of
 * the extension `btree_gist`, then your migrations. Called by {@link createTestDatabase}; call it
 * yourself in a global setup to pay the cost once.
 *
 * @example
 * await ensureTemplate(server.url);
 * await ensureTemplate(server.url, { name: 'app_template_v3', migrate: (url) => runMigrations(url) });
 */
export async function ensureTemplate(
  adminUrl: string,
  options: string | EnsureTemplateOptions = DEFAULT_TEMPLATE,
): Promise<void> {
  const { name: template = DEFAULT_TEMPLATE, migrate } =
    typeof options === 'string' ? { name: options } : options;
  if (!NAME.test(template)) throw new TypeError(`invalid template name: ${template}`);
  await withClient(adminUrl, async (client) => {
    // Session advisory lock on this one dedicated client (lock and unlock on the same connection):
    // serializes template creation between processes; released by the unlock or by disconnect.
    await client.query('SELECT pg_advisory_lock($1::bigint)', [TEMPLATE_LOCK_KEY]);
    try {
      const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [template]);
      if (exists.rowCount) return;
      const building = `${template}_building`;
      // A leftover of a crashed build is dropped (FORCE terminates its sessions). DROP/CREATE
      // DATABASE lock only the database concerned; CREATE copies template1, which nobody uses.
      await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(building)} WITH (FORCE)`);
      await client.query(`CREATE DATABASE ${client.escapeIdentifier(building)}`);
      await withClient(withDatabase(adminUrl, building), async (t) => {
        for (const ext of TEMPLATE_EXTENSIONS) await t.query(`CREATE EXTENSION IF NOT EXISTS ${ext}`);
      });
      // The migrations' connections must be closed by now: a template with sessions cannot be cloned.
      if (migrate) await migrate(withDatabase(adminUrl, building));
      // Rename when complete, so no one ever clones a half-built template.
      await client.query(
        `ALTER DATABASE ${client.escapeIdentifier(building)} RENAME TO ${client.escapeIdentifier(template)}`,
      );
    } finally {
      await client.query('SELECT pg_advisory_unlock($1::bigint)', [TEMPLATE_LOCK_KEY]);
    }
  });
}

/**
 * Creates a fresh database for one test file, cloned from a template that has the extensions of
 * the extension `btree_gist` installed. Tests in different files never share tables.
 *
 * @example
 * const db = await createTestDatabase(inject('pgUrl'));
 * const pool = new pg.Pool({ connectionString: db.url });
 * // ... tests ...
 * await pool.end();
 * await db.drop();
 */
export async function createTestDatabase(
  adminUrl: string,
  options: CreateTestDatabaseOptions = {},
): Promise<TestDatabase> {
  const template = options.template ?? DEFAULT_TEMPLATE;
  const prefix = options.prefix ?? 't';
  if (!NAME.test(prefix)) throw new TypeError(`invalid database name prefix: ${prefix}`);
  await ensureTemplate(adminUrl, options.migrate ? { name: template, migrate: options.migrate } : template);
  const name = `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  await withClient(adminUrl, async (client) => {
    // CREATE DATABASE … TEMPLATE fails while another session is connected to the template; nobody
    // connects to it after ensureTemplate, but retry briefly in case a clone races its creation.
    for (let attempt = 1; ; attempt++) {
      try {
        await client.query(
          `CREATE DATABASE ${client.escapeIdentifier(name)} TEMPLATE ${client.escapeIdentifier(template)}`,
        );
        return;
      } catch (error) {
        if (attempt >= 20 || (error as { code?: string }).code !== '55006') throw error;
        await new Promise((r) => setTimeout(r, 50 * attempt));
      }
    }
  });
  let dropped = false;
  return {
    url: withDatabase(adminUrl, name),
    name,
    drop: async () => {
      if (dropped) return;
      dropped = true;
      await withClient(adminUrl, async (client) => {
        // No lock: the sessions still connected to the database (ours is on the admin database).
        for (const deadline = Date.now() + DROP_GRACE_MS; Date.now() < deadline; ) {
          const { rows } = await client.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
            [name],
          );
          if ((rows[0]?.n ?? 0) === 0) break;
          await new Promise((r) => setTimeout(r, 20));
        }
        // ACCESS EXCLUSIVE on the database object; FORCE terminates the sessions still connected.
        await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`);
      });
    },
  };
}
