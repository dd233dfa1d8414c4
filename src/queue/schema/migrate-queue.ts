import type { ResultAsync } from 'neverthrow';
import pg from 'pg';
import { advisoryKey } from '../../advisory/advisory-key.js';
import { DbError, MigrationChanged, type TxKitError } from '../../errors/errors.js';
import { dbAttributes } from '../../observability/db-attributes.js';
import { inSpan } from '../../observability/in-span.js';
import { LogSink } from '../../observability/log-sink.js';
import type { Logger } from '../../observability/logger.js';
import type { OpenTelemetryApi } from '../../observability/otel-api.js';
import { SpanKind } from '../../observability/span-kind.js';
import { asResult } from '../../patterns/run-query.js';
import { inClientTransaction } from '../in-client-transaction.js';
import type { QueueMigration } from './queue-migration.js';
import { QUEUE_MIGRATIONS } from './queue-migrations.generated.js';

/** What `queue.migrate()` did. */
export interface MigrateResult {
  /** Versions applied by this call (empty when the schema was already up to date). */
  readonly applied: readonly number[];
  /** The schema's version after the call. */
  readonly version: number;
}

/** Where `queue.migrate()` reports: the queue's logger and OpenTelemetry API. */
export interface MigrateObservers {
  readonly logger?: Logger | undefined;
  readonly telemetry?: OpenTelemetryApi | undefined;
}

/** Stable signed 64-bit advisory key for a schema's migrations (`advisoryKey`: sha-256, not hashtext). */
export function migrationLockKey(schema: string): string {
  return advisoryKey('pg-txkit.queue.migrate', schema).toString();
}

/** The NOTIFY channel of a queue schema (unquoted). */
export function notifyChannel(schema: string): string {
  return `${schema}_jobs`;
}

/**
 * The NOTIFY channel carrying cancelled running jobs' ids (unquoted; a schema name of at most 41
 * characters keeps it within PostgreSQL's 63-byte identifiers).
 *
 * @example
 * cancelChannel('pgtxkit_queue'); // 'pgtxkit_queue_jobs_cancel'
 */
export function cancelChannel(schema: string): string {
  return `${schema}_jobs_cancel`;
}

/** The first applied migration whose record is not the shipped one, as the error migrate() returns. */
function firstDifference(
  schema: string,
  rows: readonly { version: number; name: string; checksum: string | null }[],
  shipped: readonly QueueMigration[],
): MigrationChanged | undefined {
  for (const row of rows) {
    const m = shipped.find((x) => x.version === row.version);
    if (m === undefined || m.name !== row.name || m.checksum !== row.checksum) {
      return new MigrationChanged(
        schema,
        row.version,
        { name: row.name, checksum: row.checksum },
        m === undefined ? null : { name: m.name, checksum: m.checksum },
      );
    }
  }
  return undefined;
}

/**
 * What migrate() answers with besides a driver error (classified by `asResult`): its own refusal, and —
 * since it runs at start-up, where a rejection would go unreported — anything else as a DbError carrying it.
 */
function notDriverError(e: unknown): MigrationChanged | DbError {
  if (e instanceof MigrationChanged) return e;
  return new DbError(undefined, e instanceof Error ? e.message : String(e), e);
}

/**
 * Creates or upgrades a queue schema: applies the numbered migrations it has not applied yet,
 * in one transaction, under `pg_advisory_xact_lock` on a key derived from the schema name. Two
 * processes starting at once serialize on that lock: the second sees the first one's versions in the
 * migrations table and applies nothing. The lock is transaction-scoped, so a crash or a dropped
 * connection can never leave it held (a session lock outlived its connection in production).
 *
 * @example
 * const result = await migrateQueue(pool, 'pgtxkit_queue');
 * if (result.isOk()) console.log(result.value.applied); // [1] the first time, [] afterwards
 */
export function migrateQueue(
  pool: pg.Pool,
  schema: string,
  observe: MigrateObservers = {},
  migrations: readonly QueueMigration[] = QUEUE_MIGRATIONS,
): ResultAsync<MigrateResult, TxKitError> {
  const s = pg.escapeIdentifier(schema);
  const channel = pg.escapeLiteral(notifyChannel(schema));
  const run = (): Promise<MigrateResult> =>
    inClientTransaction(pool, async (client) => {
      // Transaction-scoped advisory lock: held until COMMIT/ROLLBACK, released by the server if the
      // connection dies. It serializes concurrent migrate() calls for this schema only.
      await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [migrationLockKey(schema)]);
      // DDL below takes ACCESS EXCLUSIVE on new objects only (nobody else can see them yet).
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
      // Each applied migration's sha-256 is recorded: the files are frozen, so a recorded checksum that
      // is not the shipped one means the schema is not what this code expects (an edited migration, or
      // a schema migrated by another build), and nothing is applied.
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${s}.migrations (
           version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
           applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      // A table made before checksums were recorded (a development build before 0.2.0) lacks the column:
      // added here so that its rows read as recorded without one, and refused below (rolled back with it).
      await client.query(`ALTER TABLE ${s}.migrations ADD COLUMN IF NOT EXISTS checksum text`);
      // Plain read under the advisory lock: no other migrate() of this schema can be writing.
      const done = await client.query<{ version: number; name: string; checksum: string | null }>(
        `SELECT version, name, checksum FROM ${s}.migrations ORDER BY version`,
      );
      const changed = firstDifference(schema, done.rows, migrations);
      if (changed !== undefined) throw changed;
      const have = new Set(done.rows.map((r) => r.version));
      const applied: number[] = [];
      for (const m of migrations) {
        if (have.has(m.version)) continue;
        await client.query(m.sql.replaceAll('{{schema}}', s).replaceAll('{{channel}}', channel));
        await client.query(`INSERT INTO ${s}.migrations (version, name, checksum) VALUES ($1, $2, $3)`, [
          m.version,
          m.name,
          m.checksum,
        ]);
        applied.push(m.version);
      }
      const version = Math.max(0, ...have, ...applied);
      return { applied, version };
    });
  const log = new LogSink(observe.logger, 'pg-txkit queue migrations');
  const traced = inSpan(
    observe.telemetry,
    `migrate ${schema}`,
    SpanKind.INTERNAL,
    { ...dbAttributes(pool.options), 'db.operation.name': 'migrate', 'pg_txkit.queue.schema': schema },
    run,
    (result, span) => {
      span.setAttribute('pg_txkit.migration.applied', result.applied.join(','));
      span.setAttribute('pg_txkit.migration.version', result.version);
    },
  ).then(
    (result) => {
      if (result.applied.length > 0) {
        log.info('applied', { schema, ...result }, `schema ${schema}: applied ${result.applied.join(', ')}`);
      }
      return result;
    },
    (error: unknown) => {
      // The caller gets the Err: only a configured logger also hears of it (no console line).
      if (observe.logger !== undefined)
        log.error('failed', { err: error, schema }, `schema ${schema}: migration failed, nothing applied`);
      throw error;
    },
  );
  return asResult(traced, notDriverError);
}
