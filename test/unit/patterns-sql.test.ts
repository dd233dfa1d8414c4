import { describe, expect, it } from 'vitest';
import { Bookings } from '../../src/patterns/bookings.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { lockRows } from '../../src/patterns/lock-rows.js';
import { parseOptions } from '../../src/patterns/parse-options.js';
import {
  columnNameSchema,
  derivedName,
  quoteName,
  tableNameSchema,
} from '../../src/patterns/sql-identifier.js';
import { updateWhere } from '../../src/patterns/update-where.js';
import { upsert } from '../../src/patterns/upsert.js';
import type { Queryable } from '../../src/tx/types.js';

/** A db that records statements (no server); `status` is its transaction status. */
function recorder(status: 'I' | 'T' = 'T', rows: Record<string, unknown>[] = [{ pg_txkit_created: true }]) {
  const sent: { text: string; values: unknown[] }[] = [];
  const db = {
    getTransactionStatus: () => status,
    query: async (text: string, values?: unknown[]) => {
      sent.push({ text: text.replace(/\s+/g, ' ').trim(), values: values ?? [] });
      return { rows, rowCount: rows.length, command: 'X', oid: 0, fields: [] };
    },
  } as unknown as Queryable;
  return { db, sent };
}

describe('identifiers', () => {
  it('quotes each part of a schema-qualified name', () => {
    expect(quoteName('billing.wallets')).toBe('"billing"."wallets"');
    expect(quoteName('Weird$Name')).toBe('"Weird$Name"');
  });
  it('accepts plain identifiers only', () => {
    for (const ok of ['a', '_x', 'A1$', 'a'.repeat(63)])
      expect(columnNameSchema.safeParse(ok).success).toBe(true);
    for (const bad of ['', '1a', 'a b', 'a"b', 'a.b', 'a'.repeat(64), 'é', '$a']) {
      expect(columnNameSchema.safeParse(bad).success).toBe(false);
    }
    expect(tableNameSchema.safeParse('s.t').success).toBe(true);
    expect(tableNameSchema.safeParse('a.b.c').success).toBe(false);
    expect(tableNameSchema.safeParse('.t').success).toBe(false);
  });
  it('parseOptions reports every issue as InvalidOptions', () => {
    const r = parseOptions(tableNameSchema, 'a;b');
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(r._unsafeUnwrapErr().issues.length).toBeGreaterThan(0);
  });
});

describe('the statements the patterns send', () => {
  it('lockRows: one ordered statement per mode and wait policy, ids as one parameter', async () => {
    const cases = [
      [{}, 'FOR NO KEY UPDATE'],
      [{ mode: 'update' }, 'FOR UPDATE'],
      [{ mode: 'share', wait: 'nowait' }, 'FOR SHARE NOWAIT'],
      [{ mode: 'key share', wait: 'skipLocked' }, 'FOR KEY SHARE SKIP LOCKED'],
    ] as const;
    for (const [options, clause] of cases) {
      const { db, sent } = recorder('T', []);
      const r = await lockRows(db, { table: 'billing.wallets', ids: [3, 1, 3, 2n], ...options });
      expect(sent).toEqual([
        {
          text: `SELECT *, array_positions($1, "id") AS pg_txkit_requested_positions FROM "billing"."wallets" WHERE "id" = ANY($1) ORDER BY "id" ${clause}`,
          values: [[3, 1, '2']],
        },
      ]);
      expect(r._unsafeUnwrap()).toEqual({ rows: [], missing: [3, 1, 2n] });
    }
  });

  it('lockRows: columns always include the key; a client outside a transaction is refused', async () => {
    const { db, sent } = recorder('T', [{ sku: 'a', n: 1, pg_txkit_requested_positions: [1] }]);
    const r = await lockRows(db, { table: 'stock', key: 'sku', ids: ['a', 'b'], columns: ['n'] });
    expect(sent[0]?.text).toBe(
      'SELECT "sku", "n", array_positions($1, "sku") AS pg_txkit_requested_positions FROM "stock" WHERE "sku" = ANY($1) ORDER BY "sku" FOR NO KEY UPDATE',
    );
    // The positions column (matched ids, compared by the server) is removed from the returned rows.
    expect(r._unsafeUnwrap()).toEqual({ rows: [{ sku: 'a', n: 1 }], missing: ['b'] });
    const idle = recorder('I');
    expect((await lockRows(idle.db, { table: 'stock', ids: [1] }))._unsafeUnwrapErr().kind).toBe(
      'NotInTransaction',
    );
    expect(idle.sent).toHaveLength(0);
  });

  it('updateWhere: sends the statement as given; 0 rows → ConditionFailed', async () => {
    const { db, sent } = recorder('I', []);
    const r = await updateWhere(db, { text: 'UPDATE t SET n = n - $1 WHERE n >= $1', values: [2] });
    expect(sent).toEqual([{ text: 'UPDATE t SET n = n - $1 WHERE n >= $1', values: [2] }]);
    expect(r._unsafeUnwrapErr().kind).toBe('ConditionFailed');
  });

  it('insertOnce and upsert: ON CONFLICT with quoted columns and parameters', async () => {
    const a = recorder('I', [{ id: 1 }]);
    await insertOnce(a.db, { table: 'users', values: { email: 'x', name: 'y' }, conflict: ['email'] });
    expect(a.sent[0]).toEqual({
      text: 'INSERT INTO "users" ("email", "name") VALUES ($1, $2) ON CONFLICT ("email") DO NOTHING RETURNING *',
      values: ['x', 'y'],
    });
    const b = recorder('I');
    await upsert(b.db, {
      table: 'c',
      values: { k: 1, n: 2 },
      conflict: { constraint: 'c_pkey' },
      update: { n: 0 },
    });
    expect(b.sent[0]).toEqual({
      text: 'INSERT INTO "c" ("k", "n") VALUES ($1, $2) ON CONFLICT ON CONSTRAINT "c_pkey" DO UPDATE SET "n" = $3 RETURNING *, (xmax = 0) AS pg_txkit_created',
      values: [1, 2, 0],
    });
  });

  it('Bookings.book: half-open tstzrange, extra columns as parameters; no savepoint outside a transaction', async () => {
    const rooms = new Bookings({ table: 'b', resource: 'room_id', during: 'during' });
    expect(rooms.constraint).toBe('b_no_overlap');
    const { db, sent } = recorder('I', [{ id: 1 }]);
    const from = new Date('2030-01-01T10:00:00Z');
    const to = new Date('2030-01-01T11:00:00Z');
    await rooms.book(db, { resource: 7, from, to, values: { guest: 'Ann' } });
    expect(sent.map((s) => ({ ...s, text: s.text.replace(/\s+/g, ' ') }))).toEqual([
      {
        // The resource's advisory key (sha-256 of 'pg-txkit.bookings:b:7') is locked first, in the same statement.
        text:
          `INSERT INTO "b" ("room_id", "during", "guest") SELECT $1, tstzrange($2, $3, '[)'), $4 ` +
          `FROM (SELECT pg_advisory_xact_lock(('x' || left(encode(sha256(convert_to($5, 'UTF8')), 'hex'), 16))::bit(64)::bigint)) AS serialize RETURNING *`,
        values: [7, from, to, 'Ann', 'pg-txkit.bookings:b:7'],
      },
    ]);
    const inTx = recorder('T', [{ id: 1 }]);
    await rooms.book(inTx.db, { resource: 7, from, to: '2030-01-01T12:00:00Z' });
    expect(inTx.sent.map((s) => s.text.split(' ')[0])).toEqual(['SAVEPOINT', 'INSERT', 'RELEASE']);
  });
});

describe('derivedName', () => {
  it('keeps short names; long ones fit 63 bytes and stay distinct for bases with a common prefix', () => {
    expect(derivedName('room_bookings', 'no_overlap')).toBe('room_bookings_no_overlap');
    const a = derivedName(`${'p'.repeat(60)}_a`, 'created_at_idx');
    const b = derivedName(`${'p'.repeat(60)}_b`, 'created_at_idx');
    for (const name of [a, b]) {
      expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
      expect(name.endsWith('_created_at_idx')).toBe(true);
    }
    expect(a).not.toBe(b);
    expect(derivedName(`${'p'.repeat(60)}_a`, 'created_at_idx')).toBe(a); // stable
  });
});
