import type { ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { advisoryKey, sortedUniqueKeys } from '../advisory/advisory-key.js';
import { acquireXactLocks } from '../advisory/with-advisory-lock.js';
import { classify, type DatabaseFailure } from '../errors/index.js';
import { type Db, inTransaction, type Queryable } from '../tx/types.js';
import { asResult } from './run-query.js';
import { quoteName } from './sql-identifier.js';

/** What a migration locks and needs. */
export interface MigrationSpec {
  /**
   * What is migrated (`'bookings:public.rooms'`): migrations of the same name are serialized by a
   * transaction-scoped advisory lock on `advisoryKey('pg-txkit', 'migrate…')`-style keys.
   */
  readonly name: string;
  /** Extensions the migration needs, created (once, under their own lock) before `work`. */
  readonly extensions?: readonly string[];
  /** Longest wait for any lock (the advisory locks, then the DDL's table locks). Default 5 s. */
  readonly lockTimeoutMs?: number;
}

/** The advisory key that serializes migrations of `name` (the same bytes as the keys of earlier versions). */
export function migrationKey(name: string): bigint {
  return advisoryKey('pg-txkit', name);
}

/**
 * Runs a migration safely from many processes at once, and always as a Result.
 *
 * In one transaction: a bounded `lock_timeout`, then transaction-scoped advisory locks on the
 * migration's key and on one key per extension (taken sorted, in one statement: no deadlock between
 * migrations of different objects that share an extension), then each missing extension is created —
 * after the lock, so the check sees every earlier creator's commit — then `work`. Concurrent
 * `CREATE EXTENSION` / `CREATE TABLE IF NOT EXISTS` race in the catalog (a unique violation on
 * `pg_extension` or `pg_type`); under the lock they run one after the other and the later ones find the
 * objects present.
 *
 * `db`: a pool (a client is taken for the transaction and released), a client in autocommit (BEGIN and
 * COMMIT are sent on it), or a transaction (`Tx`, or a client after BEGIN): then the locks last until
 * the caller's transaction ends and its own `lock_timeout` applies. A database failure (a lock wait past
 * the timeout, a lost connection, missing privileges) comes back as an `Err`; a defect in `work` rejects.
 *
 * @example
 * const r = await runMigration(pool, { name: 'bookings:rooms', extensions: ['btree_gist'] }, async (q) => {
 *   await q.query('ALTER TABLE rooms ADD CONSTRAINT …');
 * });
 */
export function runMigration<T>(
  db: Db,
  spec: MigrationSpec,
  work: (q: Queryable) => Promise<T>,
): ResultAsync<T, DatabaseFailure> {
  const extensions = spec.extensions ?? [];
  const keys = [migrationKey(spec.name), ...extensions.map((e) => migrationKey(`extension:${e}`))];
  const body = async (q: Queryable): Promise<T> => {
    // pg_advisory_xact_lock on each key, sorted (bounded by the transaction's lock_timeout).
    const locked = await acquireXactLocks(q, sortedUniqueKeys(keys), { wait: 'block' });
    if (locked.isErr()) throw locked.error;
    for (const extension of extensions) {
      // Catalog read under the extension's lock: present (committed by an earlier migration) or not.
      const present = await q.query('SELECT 1 FROM pg_extension WHERE extname = $1', [extension]);
      // CREATE EXTENSION takes ROW EXCLUSIVE on pg_extension; serialized by the advisory lock above.
      if ((present.rowCount ?? 0) === 0)
        await q.query(`CREATE EXTENSION IF NOT EXISTS ${quoteName(extension)}`);
    }
    return work(q);
  };
  const run = async (): Promise<T> => {
    const q = db as Queryable;
    if (await inTransaction(db)) return body(q);
    const timeout = spec.lockTimeoutMs ?? 5000;
    const inOwnTransaction = async (c: Queryable): Promise<T> => {
      // BEGIN and a transaction-local lock_timeout (a validated integer) in one round trip: it bounds
      // the DDL's table locks too, so a migration gives up instead of queueing every reader behind it.
      await c.query(`BEGIN; SET LOCAL lock_timeout = ${Math.trunc(timeout)}`);
      try {
        const value = await body(c);
        await c.query('COMMIT');
        return value;
      } catch (error) {
        await c.query('ROLLBACK').catch(() => {});
        throw error;
      }
    };
    if (!isPool(db)) return inOwnTransaction(q);
    const client = await db.connect();
    let broken: unknown;
    try {
      return await inOwnTransaction(client);
    } catch (error) {
      broken = error;
      throw error;
    } finally {
      // A client whose connection failed is destroyed, never returned to the pool.
      client.release(
        broken !== undefined && classify(broken)?.kind === 'ConnectionLost' ? (broken as Error) : undefined,
      );
    }
  };
  // The driver's rule (everything classify recognises): runMigration is internal and every `work` of
  // ours runs only our own statements, so whatever rejects here came from pg. Made public, with a
  // user's callback as `work`, it would need the transaction's rule (ClassifyRules.raisedByDriver): a
  // user's error with `code: '23505'` comes back as Err(UniqueViolation) today.
  return asResult(run());
}

/** A pg.Pool, told structurally (the user's pg may be another copy): it hands out clients. */
function isPool(db: Db): db is pg.Pool {
  return (
    typeof db === 'object' &&
    db !== null &&
    'totalCount' in db &&
    typeof (db as { connect?: unknown }).connect === 'function'
  );
}
