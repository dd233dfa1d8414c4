import { randomBytes } from 'node:crypto';
import { err, errAsync, ok, okAsync, type Result, type ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import { extensionProblem, extensionStatus } from '../capabilities/extension-status.js';
import {
  type DatabaseFailure,
  type DeadlockDetected,
  type InvalidOptions,
  NotFound,
  Overlap,
  Unsupported,
} from '../errors/index.js';
import { sendFlight } from '../tx/send-flight.js';
import type { Db, Queryable } from '../tx/types.js';
import { parseOptions } from './parse-options.js';
import { runMigration } from './run-migration.js';
import { asResult, checkInTransaction, runQuery } from './run-query.js';
import {
  columnNameSchema,
  columnValuesSchema,
  derivedName,
  quoteName,
  tableNameSchema,
} from './sql-identifier.js';

/**
 * SQL for the signed 64-bit advisory key of a text: the first 8 bytes of its sha-256, big-endian — the
 * same value `advisoryKey(namespace, id)` computes in JavaScript for the text `namespace:id`.
 */
const SHA256_KEY_SQL = (text: string): string =>
  `('x' || left(encode(sha256(convert_to(${text}, 'UTF8')), 'hex'), 16))::bit(64)::bigint`;

/** How many times book()/move() re-run their statement after a 40P01 (or an overlap that vanished). */
const MAX_TRIES = 2;

const bookingsOptionsSchema = z
  .object({
    /** The caller's bookings table, optionally schema-qualified. It must exist. */
    table: tableNameSchema,
    /** The column naming the booked thing (room id, doctor id …). */
    resource: columnNameSchema,
    /** The `tstzrange` column holding the half-open period `[from, to)`. */
    during: columnNameSchema,
    /** The primary key column used by cancel()/move(): default 'id'. */
    id: columnNameSchema.default('id'),
    /**
     * Name of the EXCLUDE constraint migrate() adds: default `<table>_no_overlap` (shortened with a hash
     * when longer than PostgreSQL's 63 bytes).
     */
    constraint: columnNameSchema.optional(),
  })
  .strict();

/** Options of {@link Bookings}. */
export type BookingsOptions = z.input<typeof bookingsOptionsSchema>;

const instant = z.union([
  z.date().refine((d) => !Number.isNaN(d.getTime()), 'invalid date'),
  z
    .string()
    .refine((s) => /^\d{4}-\d{2}-\d{2}/.test(s) && !Number.isNaN(Date.parse(s)), 'not an ISO 8601 date')
    .transform((s) => new Date(s)),
]);

const periodSchema = z
  .object({ from: instant, to: instant })
  .strict()
  .refine((p) => p.to.getTime() > p.from.getTime(), { message: '`to` must be after `from`', path: ['to'] });

const idValue = z.union([z.string().min(1), z.number().finite(), z.bigint()]);

const bookSchema = z
  .object({
    /** The resource to book (a value of the resource column). */
    resource: z.union([z.string(), z.number().finite(), z.bigint()]),
    from: instant,
    to: instant,
    /** Other columns of the new booking row. */
    values: columnValuesSchema.optional(),
  })
  .strict()
  .refine((p) => p.to.getTime() > p.from.getTime(), { message: '`to` must be after `from`', path: ['to'] });

/** Input of {@link Bookings.book}. */
export type BookInput = z.input<typeof bookSchema>;
/** Input of {@link Bookings.move}. */
export type BookingPeriod = z.input<typeof periodSchema>;

function param(v: unknown): unknown {
  return typeof v === 'bigint' ? v.toString() : v;
}

/**
 * Non-overlapping bookings of a resource, guaranteed by PostgreSQL itself with an exclusion
 * constraint: `EXCLUDE USING gist (resource WITH =, during WITH &&)`. Nothing to lock, no
 * serializable needed: "no overlapping booking exists" is a fact about a row that does NOT exist, so
 * only a constraint can enforce it. At read committed a concurrent overlapping insert
 * waits for the first and then fails with 23P01, which `book()` turns into {@link Overlap} carrying
 * the booking(s) in the way.
 *
 * Periods are half-open `[from, to)`: a booking ending at 10:00 and one starting at 10:00 do not
 * overlap. `to <= from` or an unparsable date → `InvalidOptions` before any SQL.
 *
 * @example
 * const rooms = new Bookings({ table: 'room_bookings', resource: 'room_id', during: 'during' });
 * await rooms.migrate(pool); // btree_gist + the EXCLUDE constraint, once (deploy time)
 * const r = await rooms.book(tm.db(), { resource: 7, from: '2030-01-01T10:00Z', to: '2030-01-01T11:00Z' });
 * if (r.isErr() && r.error.kind === 'Overlap') console.log('taken by', r.error.conflicting);
 */
export class Bookings {
  /** The bookings table (possibly schema-qualified), as given. */
  readonly table: string;
  /** The column naming the booked resource (a room, a seat). */
  readonly resource: string;
  /** The `tstzrange` column of the booked period, half-open `[from, to)`. */
  readonly during: string;
  /** The primary-key column (`id` by default). */
  readonly id: string;
  /** The EXCLUDE constraint's name: a 23P01 on it is an `Overlap`, on any other an `ExclusionViolation`. */
  readonly constraint: string;
  /** Advisory-key namespace of this table's resources (see book()): `pg-txkit.bookings:<table>`. */
  readonly #lockNamespace: string;

  /** Throws `InvalidOptions` for bad identifiers (a construction-time defect, not a runtime outcome). */
  constructor(options: BookingsOptions) {
    const parsed = parseOptions(bookingsOptionsSchema, options);
    if (parsed.isErr()) throw parsed.error;
    this.table = parsed.value.table;
    this.resource = parsed.value.resource;
    this.during = parsed.value.during;
    this.id = parsed.value.id;
    const bare = parsed.value.table.split('.').pop() ?? parsed.value.table;
    this.constraint = parsed.value.constraint ?? derivedName(bare, 'no_overlap');
    this.#lockNamespace = `pg-txkit.bookings:${parsed.value.table}`;
  }

  /**
   * Installs `btree_gist` (a trusted extension: a non-superuser with CREATE on the database may do it)
   * and adds the EXCLUDE constraint to the table unless it has an exclusion constraint of that name or
   * of the same definition (under any name).
   * Idempotent and safe to run from many processes at once, the first time too: the extension and the
   * constraint are created under transaction-scoped advisory locks (see `runMigration`), so concurrent
   * callers run one after the other and the later ones find everything in place. Always a Result: a
   * lock wait past `lockTimeoutMs`, missing privileges or a lost connection is an `Err`. It checks
   * `btree_gist` first: not installed and not installable by this role (no CREATE on the database, or
   * no contrib package on the server) → `Unsupported { capability: 'btreeGist' }` whose reason names
   * the extension and how to install it; nothing is changed.
   *
   * Locks: ALTER TABLE … ADD CONSTRAINT takes ACCESS EXCLUSIVE on the table and builds a GiST index:
   * every reader and writer of the table waits meanwhile. `lock_timeout` (default 5 s) makes it give up
   * instead of queueing everyone behind it; run it at deploy time.
   *
   * @example
   * await new Bookings({ table: 'room_bookings', resource: 'room_id', during: 'during' }).migrate(pool);
   */
  migrate(
    pool: pg.Pool | pg.Client,
    options: { lockTimeoutMs?: number } = {},
  ): ResultAsync<{ created: boolean }, InvalidOptions | Unsupported | DatabaseFailure> {
    const parsed = parseOptions(
      z.object({ lockTimeoutMs: z.number().int().min(1).max(600_000).default(5000) }).strict(),
      options,
    );
    if (parsed.isErr()) return errAsync(parsed.error);
    // Start-up check (one catalog read, no lock): btree_gist installed, or this role may install it.
    // Else a typed error that names the extension and the fix, instead of CREATE EXTENSION's raw
    // 42501 / 58P01 halfway through the migration.
    const checked = asResult(extensionStatus(pool, 'btree_gist')).andThen((status) => {
      const problem = extensionProblem('btree_gist', status);
      return problem === undefined ? okAsync(undefined) : errAsync(new Unsupported('btreeGist', problem));
    });
    // The migration's advisory key is advisoryKey('pg-txkit', 'bookings:<table>'): the same bytes as in
    // earlier versions, so an old and a new replica deploying together still serialize.
    return checked.andThen(() => this.#migrate(pool, parsed.value.lockTimeoutMs));
  }

  #migrate(
    pool: pg.Pool | pg.Client,
    lockTimeoutMs: number,
  ): ResultAsync<{ created: boolean }, DatabaseFailure> {
    return runMigration(
      pool,
      {
        name: `bookings:${this.table}`,
        extensions: ['btree_gist'],
        lockTimeoutMs,
      },
      async (client) => {
        // Catalog read: the table's exclusion constraints. One named like ours, or with our definition
        // under another name, means the invariant is already enforced.
        const existing = await client.query<{ conname: string; def: string }>(
          `SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'x'`,
          [quoteName(this.table)],
        );
        const present = existing.rows.some(
          (c) => c.conname === this.constraint || this.#isOurDefinition(c.def),
        );
        if (present) return { created: false };
        // ACCESS EXCLUSIVE on the table while the GiST index is built (bounded by lock_timeout).
        await client.query(
          `ALTER TABLE ${quoteName(this.table)} ADD CONSTRAINT ${quoteName(this.constraint)}
             EXCLUDE USING gist (${quoteName(this.resource)} WITH =, ${quoteName(this.during)} WITH &&)`,
        );
        return { created: true };
      },
    );
  }

  /**
   * Is `name` the constraint that enforces our invariant: the configured name, or an exclusion
   * constraint of the table with our definition (migrate() accepts one under another name)?
   */
  async #isOwnConstraint(q: Queryable, name: string | undefined): Promise<boolean> {
    if (name === undefined || name === this.constraint) return true;
    // Catalog read (no lock beyond the catalog's ACCESS SHARE): that constraint's definition.
    const found = await q.query<{ def: string }>(
      `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2 AND contype = 'x'`,
      [quoteName(this.table), name],
    );
    return found.rows.some((c) => this.#isOurDefinition(c.def));
  }

  /** Is this `pg_get_constraintdef` text our EXCLUDE definition (under whatever name)? */
  #isOurDefinition(def: string): boolean {
    return def.replaceAll('"', '') === `EXCLUDE USING gist (${this.resource} WITH =, ${this.during} WITH &&)`;
  }

  /**
   * Books `[from, to)` for a resource: one INSERT; an overlap is refused by the EXCLUDE constraint
   * and returned as {@link Overlap} with the conflicting rows (read right after the 23P01).
   *
   * Concurrent overlapping inserts can deadlock inside the constraint check (each waits for the
   * other's uncommitted row): PostgreSQL aborts one with 40P01. book() re-runs its INSERT once (inside a
   * SAVEPOINT when `db` is in a transaction, so the caller's earlier work survives): its own row is gone,
   * so the retry just waits for the survivor and ends as `Overlap`. When the cycle runs through rows the
   * caller's transaction wrote EARLIER (T1 books room A then B, T2 books B then A), re-running one
   * statement cannot help: book() returns `DeadlockDetected`; throw it inside `tm.do`, which retries the
   * whole transaction (the retry then ends as a booking or `Overlap`). Either way the end state is one
   * booking per slot and `Overlap` for the others.
   *
   * Lock: ROW EXCLUSIVE on the table; the constraint check waits for any uncommitted overlapping
   * booking's transaction.
   *
   * @example
   * const booked = await rooms.book(tx, { resource: 7, from: new Date('2030-01-01T10:00Z'), to: new Date('2030-01-01T11:00Z'), values: { guest: 'Ann' } });
   */
  book<R extends pg.QueryResultRow = Record<string, unknown>>(
    db: Db,
    input: BookInput,
  ): ResultAsync<R, Overlap<R> | InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(bookSchema, input);
    if (parsed.isErr()) return errAsync(parsed.error);
    const { resource, from, to, values = {} } = parsed.value;
    const extra = Object.keys(values).filter((c) => c !== this.resource && c !== this.during);
    const columns = [this.resource, this.during, ...extra].map((c) => quoteName(c));
    const placeholders = ['$1', `tstzrange($2, $3, '[)')`, ...extra.map((_, i) => `$${i + 4}`)];
    const params = [param(resource), from, to, ...extra.map((c) => param(values[c]))];
    const keyParam = `$${params.length + 1}`;
    params.push(`${this.#lockNamespace}:${String(param(resource))}`);
    // Locks: first pg_advisory_xact_lock on the resource's key (held to the end of the transaction),
    // which serializes bookings of ONE resource. Without it, concurrent overlapping inserts each wait
    // inside the EXCLUDE check for the other's uncommitted row: a deadlock cycle per pair, and with many
    // clients a livelock of 40P01s costing deadlock_timeout each. Then ROW EXCLUSIVE on the table; the
    // EXCLUDE check still waits on an uncommitted overlapping booking of another writer (move()).
    const text = `INSERT INTO ${quoteName(this.table)} (${columns.join(', ')})
      SELECT ${placeholders.join(', ')} FROM (SELECT pg_advisory_xact_lock(${SHA256_KEY_SQL(keyParam)})) AS serialize
      RETURNING *`;
    return this.#withOverlap<R>(db, text, params, resource, from, to, undefined);
  }

  /**
   * Cancels (deletes) a booking by id → the deleted row, or `NotFound`.
   *
   * Lock: FOR UPDATE on the deleted row (a DELETE), until the transaction ends.
   *
   * @example
   * await rooms.cancel(tm.db(), bookingId);
   */
  cancel<R extends pg.QueryResultRow = Record<string, unknown>>(
    db: Db,
    id: string | number | bigint,
  ): ResultAsync<R, NotFound | InvalidOptions | DatabaseFailure> {
    const parsed = parseOptions(idValue, id);
    if (parsed.isErr()) return errAsync(parsed.error);
    // Lock: FOR UPDATE on the one row deleted.
    return runQuery<R>(
      db,
      `DELETE FROM ${quoteName(this.table)} WHERE ${quoteName(this.id)} = $1 RETURNING *`,
      [param(parsed.value)],
    ).andThen((r) => {
      const row = r.rows[0];
      return row === undefined ? errAsync(new NotFound(this.table, [parsed.value])) : okAsync(row);
    });
  }

  /**
   * Moves a booking to `[from, to)` atomically: ONE UPDATE, so there is no moment where the booking is
   * cancelled but not yet re-booked. `Overlap` if the new period collides with another booking (its
   * own old period never counts), `NotFound` if the id does not exist.
   *
   * Lock: FOR NO KEY UPDATE on the row (an UPDATE of a non-key column); the EXCLUDE check waits on
   * uncommitted overlapping bookings.
   *
   * @example
   * await rooms.move(tm.db(), bookingId, { from: '2030-01-01T12:00Z', to: '2030-01-01T13:00Z' });
   */
  move<R extends pg.QueryResultRow = Record<string, unknown>>(
    db: Db,
    id: string | number | bigint,
    period: BookingPeriod,
  ): ResultAsync<R, Overlap<R> | NotFound | InvalidOptions | DatabaseFailure> {
    const parsedId = parseOptions(idValue, id);
    if (parsedId.isErr()) return errAsync(parsedId.error);
    const parsed = parseOptions(periodSchema, period);
    if (parsed.isErr()) return errAsync(parsed.error);
    const { from, to } = parsed.value;
    // Locks: the resource's advisory key first (as in book(); the resource is read from the row), then
    // FOR NO KEY UPDATE on the moved row; the EXCLUDE check as for an insert.
    const key = SHA256_KEY_SQL(
      `$4 || ':' || (SELECT ${quoteName(this.resource)}::text FROM ${quoteName(this.table)} WHERE ${quoteName(this.id)} = $1)`,
    );
    const text = `UPDATE ${quoteName(this.table)} AS b SET ${quoteName(this.during)} = tstzrange($2, $3, '[)')
      FROM (SELECT pg_advisory_xact_lock(${key})) AS serialize
      WHERE b.${quoteName(this.id)} = $1 RETURNING b.*`;
    const movedId = param(parsedId.value);
    // The resource is read from the row for the Overlap report (RETURNING is empty on failure).
    return this.#withOverlap<R>(
      db,
      text,
      [movedId, from, to, this.#lockNamespace],
      undefined,
      from,
      to,
      movedId,
    ).andThen((row) =>
      row === undefined ? errAsync(new NotFound(this.table, [parsedId.value])) : okAsync(row),
    ) as ResultAsync<R, Overlap<R> | NotFound | InvalidOptions | DatabaseFailure>;
  }

  /**
   * Runs an INSERT/UPDATE that the EXCLUDE constraint may refuse; on 23P01 reads the overlapping rows,
   * on 40P01 re-runs it (in a savepoint inside a transaction). Resolves to the first returned row, or
   * undefined when the statement changed no row.
   */
  #withOverlap<R extends pg.QueryResultRow>(
    db: Db,
    text: string,
    params: unknown[],
    resource: unknown,
    from: Date,
    to: Date,
    excludeId: unknown,
  ): ResultAsync<R, Overlap<R> | DatabaseFailure> {
    const q = db as Queryable;
    let inTx: boolean | undefined;
    const attempt = async (): Promise<Result<{ row: R | undefined }, DatabaseFailure>> => {
      if (inTx === undefined) {
        const checked = await checkInTransaction(db);
        if (checked.isErr()) return err(checked.error);
        inTx = checked.value;
      }
      if (!inTx) return (await runQuery<R>(db, text, params)).map((r) => ({ row: r.rows[0] }));
      // A savepoint so that a refused statement leaves the caller's transaction usable (we still need to
      // read the conflicting rows, and a 40P01 retry must not lose the caller's earlier work).
      const savepoint = `pg_txkit_booking_${randomBytes(6).toString('hex')}`;
      // SAVEPOINT (no lock), the statement, RELEASE SAVEPOINT (keeps its row and locks) in ONE round
      // trip, up to one Sync (see sendFlight): if SAVEPOINT fails the statement never runs, and if the
      // statement fails the server discards the RELEASE behind it. 3 round trips → 1 on success
      // (bench/pattern-flight).
      const sent = await sendFlight<R>(db, {
        opening: [`SAVEPOINT ${savepoint}`],
        text,
        values: params,
        closing: [`RELEASE SAVEPOINT ${savepoint}`],
      });
      // SAVEPOINT (an aborted transaction) or RELEASE failed: classified below, as when they were sent
      // on their own.
      if (!sent.ok && sent.part !== 'statement') throw sent.error;
      const result = await asResult(sent.ok ? Promise.resolve(sent.result) : Promise.reject(sent.error));
      if (result.isOk()) return ok({ row: result.value.rows[0] });
      // The statement failed: undo it (ROLLBACK TO releases the locks it took) and drop the savepoint,
      // both in one round trip (a failed ROLLBACK TO aborts the transaction, so the RELEASE the server
      // then discards would have failed too). Their errors are not the caller's: the statement's is.
      await sendFlight(db, {
        opening: [`ROLLBACK TO SAVEPOINT ${savepoint}`],
        text: `RELEASE SAVEPOINT ${savepoint}`,
        values: [],
        closing: [],
      });
      return err(result.error);
    };
    const conflicting = async (): Promise<Result<R[], DatabaseFailure>> => {
      const where = [
        `${quoteName(this.during)} && tstzrange($1, $2, '[)')`,
        resource === undefined
          ? `${quoteName(this.resource)} = (SELECT ${quoteName(this.resource)} FROM ${quoteName(this.table)} WHERE ${quoteName(this.id)} = $3)`
          : `${quoteName(this.resource)} = $3`,
        excludeId === undefined ? 'true' : `${quoteName(this.id)} IS DISTINCT FROM $3`,
      ];
      // Plain read (no lock) of the bookings in the way, for the error report.
      return runQuery<R>(
        db,
        `SELECT * FROM ${quoteName(this.table)} WHERE ${where.join(' AND ')} ORDER BY ${quoteName(this.during)}`,
        [from, to, resource === undefined ? excludeId : resource],
      ).map((r) => r.rows);
    };
    const loop = async (): Promise<Result<R, Overlap<R> | DatabaseFailure>> => {
      let last: DatabaseFailure | DeadlockDetected | undefined;
      for (let n = 1; n <= MAX_TRIES; n++) {
        const result = await attempt();
        if (result.isOk()) return ok(result.value.row as R);
        last = result.error;
        if (last.kind === 'DeadlockDetected') continue;
        if (last.kind !== 'ExclusionViolation') return err(last);
        // Only our constraint means "overlapping booking"; another exclusion constraint of the table (a
        // guest in one room at a time …) is reported as itself.
        if (!(await this.#isOwnConstraint(q, last.constraint))) return err(last);
        const rows = await conflicting();
        if (rows.isErr()) return err(rows.error);
        if (rows.value.length > 0 || n === MAX_TRIES) {
          return err(new Overlap<R>(rows.value, last.constraint ?? this.constraint, last));
        }
        // The booking in the way was cancelled between the refusal and our read: try again.
      }
      return err(last as DatabaseFailure);
    };
    // A failure outside the statement itself (SAVEPOINT in an aborted transaction, a lost connection) is
    // classified too; anything else is a defect and rejects.
    return asResult(loop()).andThen((r) => r);
  }
}
