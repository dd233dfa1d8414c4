/** The PostgreSQL-compatible engines `engineOf` (behind `capabilities()`) tells apart. */
export type Engine = 'postgresql' | 'cockroachdb' | 'yugabytedb' | 'aurora-dsql' | 'citus';

/** What `engineOf` (behind `capabilities()`) looks at: the server's own words, and where the connection goes. */
export interface EngineClues {
  /** `SELECT version()`. */
  readonly version: string;
  /** The installed version of the `citus` extension, if any (`pg_extension`). */
  readonly citus?: string | undefined;
  /** The host the connection goes to, when known (Aurora DSQL reports a plain PostgreSQL version). */
  readonly host?: string | undefined;
}

// Aurora DSQL cluster endpoints: <cluster id>.dsql.<region>.on.aws (and dsql-fips).
const DSQL_HOST = /\.dsql(-fips)?\.[a-z0-9-]+\.on\.aws$/i;

/**
 * Which engine answers, from the server's `version()` string and settings as each engine documents
 * them: CockroachDB says `CockroachDB CCL v…`; YugabyteDB reports `PostgreSQL 11.2-YB-2.x…` (or
 * `15.2-YB-…`); Citus is PostgreSQL with the `citus` extension installed; Aurora DSQL reports a
 * PostgreSQL version, so it is told by its endpoint's host name (`….dsql.<region>.on.aws`). Anything
 * else is PostgreSQL (RDS, Aurora PostgreSQL, Neon, Supabase … are PostgreSQL servers).
 *
 * @example
 * engineOf({ version: 'CockroachDB CCL v24.1.0 (x86_64-pc-linux-gnu, built 2024/05/15)' }); // 'cockroachdb'
 * engineOf({ version: 'PostgreSQL 16.4', host: 'abc123.dsql.us-east-1.on.aws' }); // 'aurora-dsql'
 */
export function engineOf(clues: EngineClues): Engine {
  if (/^CockroachDB/i.test(clues.version)) return 'cockroachdb';
  if (/-YB-/.test(clues.version)) return 'yugabytedb';
  if (clues.host !== undefined && DSQL_HOST.test(clues.host)) return 'aurora-dsql';
  if (clues.citus !== undefined) return 'citus';
  return 'postgresql';
}
