import type { Queryable } from '../tx/types.js';

/** Where an extension stands for this role on this database. */
export type ExtensionStatus =
  | 'installed' // in pg_extension
  | 'installable' // available, and this role may CREATE EXTENSION it (trusted + CREATE on the database, or superuser)
  | 'not-permitted' // available, but this role may not install it: a superuser or the database owner must
  | 'read-only' // available, but this session cannot install anything: a hot standby or a read-only session
  | 'unavailable'; // not shipped with this server (no contrib package, or an engine without extensions)

/** The columns {@link extensionStatusOf} reads, for the extension named by the parameter `param`. */
export interface ExtensionFacts {
  readonly ext_installed: string | null;
  readonly ext_available: boolean;
  readonly ext_trusted: boolean;
  readonly superuser: boolean;
  readonly can_create: boolean;
  /** A hot standby (in recovery) or a session whose transactions are read-only: CREATE EXTENSION fails (25006). */
  readonly read_only_session: boolean;
}

/**
 * The select-list of {@link ExtensionFacts} for the extension named by the SQL parameter `param`
 * (`'$1'`). No lock beyond catalog reads (ACCESS SHARE on pg_extension / pg_roles for the statement);
 * pg_available_extension_versions reads the extension control files.
 */
export const extensionFactsSql = (param: string): string =>
  `(SELECT extversion FROM pg_extension WHERE extname = ${param}) AS ext_installed,
  EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = ${param}) AS ext_available,
  COALESCE((SELECT bool_or(trusted) FROM pg_available_extension_versions WHERE name = ${param}), false) AS ext_trusted,
  COALESCE((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) AS superuser,
  has_database_privilege(current_database(), 'CREATE') AS can_create,
  (pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on') AS read_only_session`;

/** {@link ExtensionStatus} from the facts of {@link extensionFactsSql}. */
export function extensionStatusOf(f: ExtensionFacts): ExtensionStatus {
  if (f.ext_installed !== null) return 'installed';
  if (!f.ext_available) return 'unavailable';
  // Rights do not matter where nothing can be written: on a standby or in a read-only session the
  // CREATE EXTENSION a superuser may run still fails (25006), so it is not "installable" there.
  if (f.read_only_session) return 'read-only';
  return f.superuser || (f.ext_trusted && f.can_create) ? 'installable' : 'not-permitted';
}

/**
 * What is wrong with `extension` in this state and how to fix it, or undefined when it is usable
 * (installed, or this role may install it).
 *
 * @example
 * extensionProblem('btree_gist', 'not-permitted'); // '… run CREATE EXTENSION btree_gist as a superuser …'
 */
export function extensionProblem(extension: string, status: ExtensionStatus): string | undefined {
  switch (status) {
    case 'installed':
    case 'installable':
      return undefined;
    case 'not-permitted':
      return `the ${extension} extension is not installed and this role may not install it: run CREATE EXTENSION ${extension} as a superuser or the database owner (or GRANT CREATE ON DATABASE to this role, if ${extension} is a trusted extension, as btree_gist is)`;
    case 'read-only':
      return `the ${extension} extension is not installed and this connection cannot install it (a hot standby or a read-only session): run CREATE EXTENSION ${extension} on the primary, in a read-write session`;
    case 'unavailable':
      return `the ${extension} extension is not available on this server: install PostgreSQL's contrib package (postgresql-contrib, or your provider's ${extension}), then run CREATE EXTENSION ${extension}`;
  }
}

/**
 * Where `extension` stands for the current role on the current database: one catalog read.
 *
 * @example
 * if ((await extensionStatus(pool, 'btree_gist')) === 'not-permitted') console.error('ask a DBA');
 */
export async function extensionStatus(q: Queryable, extension: string): Promise<ExtensionStatus> {
  const { rows } = await q.query<ExtensionFacts & Record<string, unknown>>(
    `SELECT ${extensionFactsSql('$1')}`,
    [extension],
  );
  const facts = rows[0];
  if (facts === undefined) throw new Error('the extension facts query returned no row');
  return extensionStatusOf(facts);
}
