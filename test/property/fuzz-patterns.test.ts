import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Bookings } from '../../src/patterns/bookings.js';
import { IdempotencyKeys } from '../../src/patterns/idempotency-keys.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { lockRows } from '../../src/patterns/lock-rows.js';
import { updateWhere } from '../../src/patterns/update-where.js';
import { upsert } from '../../src/patterns/upsert.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Queryable } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';
import {
  acquireCounter,
  anyValue,
  expectIntact,
  expectTyped,
  FUZZ_SEED,
  field,
  hostileString,
  installCanary,
  maybe,
  options,
  outcomeOf,
  RUNS,
  stringField,
  Tally,
} from './fuzz-support.js';

// Bad-input fuzzing of the patterns: every call returns a value or a typed error; invalid
// options send nothing; identifiers are validated and quoted, values are parameters, so no injected
// statement ever runs and no syntax error ever comes from our SQL.
const { pool } = await useTestDatabase();
const acquired = acquireCounter(pool);
await installCanary(pool);
await pool.query(`CREATE TABLE fz_items (id int PRIMARY KEY, sku text UNIQUE, qty int NOT NULL DEFAULT 0,
                    note text, CONSTRAINT fz_items_qty_check CHECK (qty >= 0));
  INSERT INTO fz_items (id, sku, qty) SELECT g, 'sku' || g, 10 FROM generate_series(1, 20) g;
  CREATE TABLE fz_bookings (id serial PRIMARY KEY, room int NOT NULL, during tstzrange NOT NULL, guest text)`);
const tm = new TxManager(pool);

/** Codes a *value* may legitimately cause (a string where an int is expected, out of range …). */
const VALUE_CODES = ['22P02', '22003', '22007', '22008', '22021', '22P05', '22023', '22004', '22P03'];
/** Codes for a valid identifier naming something that does not exist (the caller's mistake, reported). */
const ABSENT_CODES = ['42P01', '42703', '42704', '3F000'];

const numberish = fc.oneof(
  fc.integer({ min: -3, max: 25 }),
  fc.constantFrom<unknown>(
    2_147_483_648,
    -0,
    1.5,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    10n,
    2n ** 70n,
    '7',
    'x',
  ),
);
const ids = fc.oneof(
  { weight: 5, arbitrary: fc.array(fc.integer({ min: 0, max: 25 }), { minLength: 1, maxLength: 5 }) },
  { weight: 2, arbitrary: fc.array(numberish, { maxLength: 4 }) },
  { weight: 1, arbitrary: fc.array(hostileString, { minLength: 1, maxLength: 2 }) },
  { weight: 1, arbitrary: anyValue },
);
const columnName = stringField(['id', 'sku', 'qty', 'note']);
const tableName = stringField(['fz_items', 'public.fz_items']);

/**
 * Asserts the call sent nothing when it answered InvalidOptions (the convention), via a counter — except
 * `catalogReads` read-only catalog lookups that the check itself needs (insertOnce with `{ constraint }`
 * reads the constraint's columns to refuse an exclusion constraint or a key left to its DEFAULT).
 */
function refusedBeforeSql(label: string, before: number, after: number, catalogReads = 0): void {
  if (label === 'InvalidOptions' || label === 'throw:InvalidOptions') {
    expect(after - before, 'InvalidOptions must be returned before any SQL is sent').toBeLessThanOrEqual(
      catalogReads,
    );
  }
}

/** 1 for insertOnce options whose conflict target is `{ constraint }` (read from the catalog first). */
function constraintLookups(o: unknown): number {
  const conflict = typeof o === 'object' && o !== null ? (o as { conflict?: unknown }).conflict : undefined;
  return typeof conflict === 'object' && conflict !== null && !Array.isArray(conflict) ? 1 : 0;
}

describe('fuzz: patterns', () => {
  it('updateWhere: query shape and options', async () => {
    const tally = new Tally();
    const query = fc.oneof(
      {
        weight: 1,
        arbitrary: fc.record({
          text: fc.constantFrom(
            'UPDATE fz_items SET qty = qty - $2 WHERE id = $1 AND qty >= $2',
            'UPDATE fz_items SET note = $2::text WHERE sku = $1::text RETURNING id',
          ),
          values: fc.oneof(fc.tuple(numberish, numberish), fc.tuple(hostileString, hostileString)),
        }),
      },
      { weight: 2, arbitrary: fc.record({ text: fc.constantFrom('', '   ', 5), values: anyValue }) },
      { weight: 2, arbitrary: anyValue },
    );
    const opts = options({
      expect: field(fc.constantFrom('one', 'some', 'many', 'ONE')),
      notFound: field(
        options({ table: tableName, key: stringField(['id', 'sku']), id: field(numberish) }),
        3,
      ),
    });
    await fc.assert(
      fc.asyncProperty(query, opts, async (q, o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => updateWhere(pool, q as never, o as never));
        const label = expectTyped(outcome, {
          kinds: ['InvalidOptions', 'ConditionFailed', 'NotFound', 'CheckViolation'],
          dbCodes: [...VALUE_CODES, ...ABSENT_CODES, '08P01'],
        });
        refusedBeforeSql(label, before, acquired());
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`updateWhere: ${tally}`);
    await expectIntact(pool);
  });

  it('lockRows: table, key, ids, mode, wait, columns (inside a transaction)', async () => {
    const tally = new Tally();
    const client = await pool.connect();
    let sent = 0;
    // The caller's transaction: a pinned client after BEGIN; statements are counted on their way.
    const db = {
      query: (...args: Parameters<Queryable['query']>) => {
        sent++;
        return (client.query as (...a: unknown[]) => Promise<pg.QueryResult>)(...args);
      },
      getTransactionStatus: () => client.getTransactionStatus(),
    } as unknown as Queryable;
    await client.query('BEGIN');
    try {
      const opts = options({
        table: tableName,
        key: stringField(['id', 'sku']),
        ids,
        mode: field(fc.constantFrom('no key update', 'update', 'share', 'key share', 'exclusive')),
        wait: field(fc.constantFrom('block', 'nowait', 'skipLocked', 'skip locked')),
        columns: field(fc.array(columnName, { maxLength: 3 })),
      });
      await fc.assert(
        fc.asyncProperty(opts, async (o) => {
          const before = sent;
          const outcome = await outcomeOf(() => lockRows(db, o as never));
          const label = expectTyped(outcome, { dbCodes: [...VALUE_CODES, ...ABSENT_CODES] });
          refusedBeforeSql(label, before, sent);
          tally.add(label);
          // A failed statement aborts the transaction. (Right after the rejection the client's
          // getTransactionStatus() can still say 'T': ReadyForQuery may arrive in a later chunk.)
          if (label !== 'ok' && label !== 'InvalidOptions') await client.query('ROLLBACK; BEGIN');
        }),
        { seed: FUZZ_SEED, numRuns: RUNS },
      );
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    console.log(`lockRows: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  const rowValues = fc.oneof(
    {
      weight: 6,
      arbitrary: fc
        .record({
          id: fc.integer({ min: 1, max: 30 }),
          sku: fc.oneof(fc.constantFrom('sku1', 'sku2', 'new'), hostileString),
          qty: numberish,
          note: fc.oneof(hostileString, fc.string({ maxLength: 8 })),
        })
        .chain((r) =>
          fc
            .subarray(Object.keys(r), { minLength: 1 })
            .map((keys) => Object.fromEntries(keys.map((k) => [k, r[k as keyof typeof r]]))),
        ),
    },
    { weight: 2, arbitrary: fc.dictionary(hostileString, numberish, { maxKeys: 3 }) },
    { weight: 1, arbitrary: anyValue },
  );
  const conflict = fc.oneof(
    { weight: 4, arbitrary: fc.array(stringField(['id', 'sku']), { minLength: 1, maxLength: 2 }) },
    {
      weight: 2,
      arbitrary: fc.record({
        constraint: stringField(['fz_items_pkey', 'fz_items_sku_key', 'fz_items_qty_check']),
      }),
    },
    { weight: 1, arbitrary: anyValue },
  );
  const integrity = ['InvalidOptions', 'UniqueViolation', 'NotNullViolation', 'CheckViolation'];
  // 42P10: ON CONFLICT names columns with no unique index (the caller's mistake, reported by PostgreSQL);
  // 42809: ON CONFLICT ON CONSTRAINT names a CHECK constraint.
  const conflictCodes = [...VALUE_CODES, ...ABSENT_CODES, '42P10', '42809'];

  it('insertOnce: table, values, conflict, returning', async () => {
    const tally = new Tally();
    const opts = options({
      table: tableName,
      values: rowValues,
      conflict,
      returning: field(fc.array(columnName, { maxLength: 3 })),
    });
    await fc.assert(
      fc.asyncProperty(opts, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => insertOnce(pool, o as never));
        const label = expectTyped(outcome, { kinds: integrity, dbCodes: conflictCodes });
        refusedBeforeSql(label, before, acquired(), constraintLookups(o));
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`insertOnce: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('upsert: table, values, conflict, update, returning', async () => {
    const tally = new Tally();
    const opts = options({
      table: tableName,
      values: rowValues,
      conflict,
      update: fc.oneof(fc.array(columnName, { maxLength: 3 }), rowValues),
      returning: field(fc.array(columnName, { maxLength: 3 })),
    });
    await fc.assert(
      fc.asyncProperty(opts, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => upsert(pool, o as never));
        const label = expectTyped(outcome, { kinds: integrity, dbCodes: conflictCodes });
        refusedBeforeSql(label, before, acquired());
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`upsert: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('insertOnce/upsert near-valid: real table, columns with duplicates, hostile values', async () => {
    const tally = new Tally();
    const cols = fc.array(fc.constantFrom('id', 'sku', 'qty', 'note'), { minLength: 1, maxLength: 4 });
    const near = fc.record({
      values: rowValues.filter((v) => typeof v === 'object' && v !== null && 'id' in v),
      conflict: fc.oneof(
        fc.constantFrom(['id'], ['id', 'id'], ['sku'], ['id', 'sku']),
        fc.constantFrom({ constraint: 'fz_items_pkey' }, { constraint: 'fz_items_sku_key' }),
      ),
      update: maybe(fc.oneof(cols, fc.dictionary(fc.constantFrom('qty', 'note', 'sku'), numberish))),
      returning: maybe(cols),
    });
    await fc.assert(
      fc.asyncProperty(near, fc.boolean(), async (raw, once) => {
        const o = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined));
        const before = acquired();
        const { update, ...rest } = o;
        const outcome = await outcomeOf(() =>
          once
            ? insertOnce(pool, { table: 'fz_items', ...rest } as never)
            : upsert(pool, { table: 'fz_items', ...o } as never),
        );
        const label = expectTyped(outcome, { kinds: integrity, dbCodes: [...VALUE_CODES, '42P10'] });
        refusedBeforeSql(label, before, acquired(), once ? constraintLookups(rest) : 0);
        tally.add(`${once ? 'insertOnce' : 'upsert'}:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 20 },
    );
    console.log(`near-valid: ${tally}`);
    expect(tally.get('upsert:ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('IdempotencyKeys: constructor options, run(key, fn, { fingerprint })', async () => {
    const tally = new Tally();
    const keys = new IdempotencyKeys(tm, { table: 'fz_idem' });
    expect((await keys.migrate()).isOk()).toBe(true);
    const ctor = options({
      table: stringField(['fz_idem', 'public.fz_idem']),
      ttl: field(fc.constantFrom<unknown>(1, '30s', '24h', '7d', 0, -5, '1w', 1.5, '99999999999d')),
      onConcurrent: field(fc.constantFrom('wait', 'fail', 'block')),
    });
    await fc.assert(
      fc.asyncProperty(ctor, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => new IdempotencyKeys(tm, o as never));
        const label = expectTyped(outcome, { throws: true });
        refusedBeforeSql(label, before, acquired());
        tally.add(`new:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 2 },
    );
    const key = fc.oneof(
      { weight: 3, arbitrary: fc.string({ minLength: 1, maxLength: 8 }) },
      { weight: 3, arbitrary: hostileString },
      { weight: 1, arbitrary: fc.constantFrom<unknown>('k'.repeat(513), 5, null, undefined) },
      { weight: 1, arbitrary: anyValue },
    );
    const runOptions = options({ fingerprint: field(fc.oneof(hostileString, fc.string({ maxLength: 4 }))) });
    const result = fc.oneof(
      fc.jsonValue({ maxDepth: 2 }),
      fc.constantFrom<unknown>(undefined, 'a\u0000b', { s: '\u0000' }),
    );
    let n = 0;
    await fc.assert(
      fc.asyncProperty(key, runOptions, result, async (k, o, r) => {
        const before = acquired();
        // Keys are made unique per case half the time (first runs), else replays of earlier keys.
        const outcome = await outcomeOf(() => keys.run(k as never, () => r, o as never));
        const label = expectTyped(outcome, {
          kinds: ['InvalidOptions', 'IdempotencyConflict', 'InProgress'],
          // Only fn's own result can fail in SQL: a string with U+0000 cannot be stored as jsonb (22P05).
          dbCodes: ['22P05'],
        });
        refusedBeforeSql(label, before, acquired());
        tally.add(`run:${label}`);
        n++;
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 2 },
    );
    console.log(`IdempotencyKeys: ${tally} (${n})`);
    expect(tally.get('run:ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('Bookings: constructor options, book, cancel, move', async () => {
    const tally = new Tally();
    const rooms = new Bookings({ table: 'fz_bookings', resource: 'room', during: 'during' });
    expect((await rooms.migrate(pool)).isOk()).toBe(true);
    const ctor = options({
      table: stringField(['fz_bookings', 'public.fz_bookings']),
      resource: stringField(['room']),
      during: stringField(['during']),
      id: stringField(['id']),
      constraint: stringField(['fz_bookings_no_overlap']),
    });
    await fc.assert(
      fc.asyncProperty(ctor, async (o) => {
        const outcome = await outcomeOf(() => new Bookings(o as never));
        tally.add(`new:${expectTyped(outcome, { throws: true })}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 4 },
    );
    const instant = fc.oneof(
      { weight: 4, arbitrary: fc.date({ min: new Date('2030-01-01'), max: new Date('2030-01-03') }) },
      {
        weight: 2,
        arbitrary: fc.constantFrom<unknown>(
          '2030-01-01T10:00Z',
          '2030-01-01',
          '2030-02-30',
          '0000-01-01',
          '9999-12-31T23:59:59Z',
          new Date(8.64e15),
          new Date(-8.64e15),
          new Date(Number.NaN),
          'tomorrow',
          0,
          Number.NaN,
        ),
      },
      { weight: 1, arbitrary: hostileString },
      { weight: 1, arbitrary: anyValue },
    );
    const book = options({
      resource: field(numberish),
      from: instant,
      to: instant,
      values: field(fc.dictionary(stringField(['guest', 'room', 'id']), fc.oneof(hostileString, numberish))),
    });
    const bookingKinds = ['InvalidOptions', 'Overlap', 'NotFound', 'NotNullViolation', 'UniqueViolation'];
    await fc.assert(
      fc.asyncProperty(book, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => rooms.book(pool, o as never));
        // 42703: `values` names a column the table does not have (the caller's mistake, reported).
        const label = expectTyped(outcome, {
          kinds: bookingKinds,
          dbCodes: [...VALUE_CODES, ...ABSENT_CODES],
        });
        refusedBeforeSql(label, before, acquired());
        tally.add(`book:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 4 },
    );
    const period = options({ from: instant, to: instant });
    // Mostly ids refused before SQL (each valid one is a round trip).
    const badId = fc.oneof(
      { weight: 1, arbitrary: numberish },
      {
        weight: 3,
        arbitrary: fc.constantFrom<unknown>('', Number.NaN, Number.POSITIVE_INFINITY, null, {}, []),
      },
      { weight: 2, arbitrary: anyValue },
    );
    await fc.assert(
      fc.asyncProperty(badId, period, fc.boolean(), async (id, p, cancel) => {
        const before = acquired();
        const outcome = await outcomeOf(() =>
          cancel ? rooms.cancel(pool, id as never) : rooms.move(pool, id as never, p as never),
        );
        const label = expectTyped(outcome, { kinds: bookingKinds, dbCodes: VALUE_CODES });
        refusedBeforeSql(label, before, acquired());
        tally.add(`${cancel ? 'cancel' : 'move'}:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 2 },
    );
    console.log(`Bookings: ${tally}`);
    expect(tally.get('book:ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });
});

afterAll(async () => {
  // Nothing may be left checked out by any test of this file.
  expect(pool.totalCount - pool.idleCount).toBe(0);
});
