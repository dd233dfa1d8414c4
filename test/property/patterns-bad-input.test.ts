import fc from 'fast-check';
import type { ResultAsync } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import { Bookings } from '../../src/patterns/bookings.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { lockRows } from '../../src/patterns/lock-rows.js';
import { updateWhere } from '../../src/patterns/update-where.js';
import { upsert } from '../../src/patterns/upsert.js';
import type { Queryable } from '../../src/tx/types.js';
import { useTestDatabase } from '../helpers.js';

// Random identifiers, ranges and options: the patterns answer InvalidOptions and send NOTHING, or send
// SQL where identifiers are quoted and every value is a parameter. Never a syntax error, never injection.
const { pool } = await useTestDatabase();
await pool.query('CREATE TABLE notes (id serial PRIMARY KEY, title text NOT NULL UNIQUE, body text)');

const PLAIN = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;
const validTable = (s: string) => s.split('.').length <= 2 && s.split('.').every((p) => PLAIN.test(p));

/** A db that records statements instead of running them (and says it is in a transaction). */
function recorder() {
  const sent: { text: string; values: unknown[] }[] = [];
  const db = {
    getTransactionStatus: () => 'T',
    query: async (text: string, values?: unknown[]) => {
      sent.push({ text, values: values ?? [] });
      return { rows: [{ pg_txkit_created: true }], rowCount: 1, command: 'SELECT', oid: 0, fields: [] };
    },
  } as unknown as Queryable;
  return { db, sent };
}

async function outcome(r: ResultAsync<unknown, { kind: string }>): Promise<string> {
  const settled = await r;
  return settled.isOk() ? 'ok' : settled.error.kind;
}

const hostile = fc.constantFrom(
  'x; DROP TABLE notes; --',
  'notes"; DROP TABLE notes; --',
  "notes' OR '1'='1",
  'a.b.c',
  '1abc',
  '',
  ' notes',
  'no tes',
  'notes\u0000',
  'é',
  'a'.repeat(64),
  'public.',
  '.notes',
);
const identifierLike = fc.oneof(
  hostile,
  fc.string(),
  fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_$]{0,20}(\.[A-Za-z_][A-Za-z0-9_]{0,20})?$/),
);

describe('bad input never reaches SQL', () => {
  it('lockRows: random table/key/columns/mode/wait → InvalidOptions with nothing sent, or quoted SQL', async () => {
    await fc.assert(
      fc.asyncProperty(
        identifierLike,
        identifierLike,
        fc.array(identifierLike, { maxLength: 3 }),
        fc.oneof(fc.constantFrom('no key update', 'update', 'share', 'key share'), fc.string()),
        fc.oneof(fc.constantFrom('block', 'nowait', 'skipLocked'), fc.string()),
        fc.array(fc.oneof(fc.integer(), fc.string(), fc.double()), { maxLength: 4 }),
        async (table, key, columns, mode, wait, ids) => {
          const { db, sent } = recorder();
          const options = { table, key, ids, mode, wait, ...(columns.length ? { columns } : {}) };
          const result = await outcome(lockRows(db, options as never));
          const valid =
            validTable(table) &&
            PLAIN.test(key) &&
            columns.every((c) => PLAIN.test(c)) &&
            ['no key update', 'update', 'share', 'key share'].includes(mode) &&
            ['block', 'nowait', 'skipLocked'].includes(wait) &&
            ids.length > 0 &&
            ids.every((id) => typeof id !== 'number' || Number.isFinite(id));
          if (!valid) {
            expect(result).toBe('InvalidOptions');
            expect(sent).toHaveLength(0);
          } else {
            expect(result).toBe('ok');
            expect(sent).toHaveLength(1);
            expect(sent[0]!.text).toContain(
              table
                .split('.')
                .map((p) => `"${p}"`)
                .join('.'),
            );
            expect(sent[0]!.values).toHaveLength(1); // the ids: one array parameter
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a column named __proto__ is refused with its own message, never dropped from the row', async () => {
    // Found by the property below: the options parser copies `values`, and that copy leaves out an own
    // key named __proto__, so { note, __proto__ } inserted the note alone.
    const values: Record<string, unknown> = { note: 'kept' };
    Object.defineProperty(values, '__proto__', {
      value: 'lost',
      enumerable: true,
      writable: true,
      configurable: true,
    });
    for (const run of [
      (db: Queryable) => insertOnce(db, { table: 'notes', values, conflict: ['note'] }),
      (db: Queryable) => upsert(db, { table: 'notes', values, conflict: ['note'] }),
      (db: Queryable) =>
        new Bookings({ table: 'bookings', resource: 'room_id', during: 'during' }).book(db, {
          resource: 1,
          from: new Date('2026-01-01T10:00:00Z'),
          to: new Date('2026-01-01T11:00:00Z'),
          values,
        }),
    ]) {
      const { db, sent } = recorder();
      const result = await (run(db) as ResultAsync<unknown, { kind: string; message: string }>);
      expect(result.isErr() && result.error.kind).toBe('InvalidOptions');
      expect(result.isErr() && result.error.message).toMatch(/__proto__/);
      expect(sent).toHaveLength(0);
    }
  });

  it('insertOnce / upsert: random column names → InvalidOptions, values only ever as parameters', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(identifierLike, fc.oneof(fc.string(), fc.integer(), fc.constant(null)), { maxKeys: 4 }),
        async (values) => {
          for (const run of [
            (db: Queryable) =>
              insertOnce(db, { table: 'notes', values, conflict: Object.keys(values).slice(0, 1) }),
            (db: Queryable) =>
              upsert(db, { table: 'notes', values, conflict: Object.keys(values).slice(0, 1) }),
          ]) {
            const { db, sent } = recorder();
            const result = await outcome(run(db) as ResultAsync<unknown, { kind: string }>);
            const columns = Object.keys(values);
            // __proto__ is a plain identifier, but refused: see the test below.
            if (
              columns.length === 0 ||
              !columns.every((c) => PLAIN.test(c)) ||
              columns.includes('__proto__')
            ) {
              expect(result).toBe('InvalidOptions');
              expect(sent).toHaveLength(0);
            } else {
              expect(sent.length).toBeGreaterThan(0);
              expect(sent[0]!.values).toEqual(Object.values(values));
              // the SQL text does not depend on the values at all: run again with every value null
              const again = recorder();
              const nulls = Object.fromEntries(columns.map((c) => [c, null]));
              const conflict = columns.slice(0, 1);
              await (sent[0]!.text.includes('DO UPDATE')
                ? upsert(again.db, { table: 'notes', values: nulls, conflict })
                : insertOnce(again.db, { table: 'notes', values: nulls, conflict }));
              expect(again.sent[0]!.text).toBe(sent[0]!.text);
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('Bookings: random from/to (dates, strings, numbers) → InvalidOptions unless a valid [from, to)', async () => {
    const rooms = new Bookings({ table: 'bookings', resource: 'room_id', during: 'during' });
    const instant = fc.oneof(
      fc.date({ noInvalidDate: false }),
      fc
        .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
        .map((d) => d.toISOString()),
      fc.string(),
      fc.integer(),
      fc.constant(undefined),
    );
    await fc.assert(
      fc.asyncProperty(instant, instant, async (from, to) => {
        const { db, sent } = recorder();
        const result = await outcome(rooms.book(db, { resource: 1, from, to } as never));
        const time = (v: unknown) =>
          v instanceof Date
            ? v.getTime()
            : typeof v === 'string' && /^\d{4}-\d{2}-\d{2}/.test(v)
              ? Date.parse(v)
              : Number.NaN;
        const valid = !Number.isNaN(time(from)) && !Number.isNaN(time(to)) && time(to) > time(from);
        if (!valid) {
          expect(result).toBe('InvalidOptions');
          expect(sent).toHaveLength(0);
        } else {
          expect(sent.length).toBeGreaterThan(0);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('updateWhere: random options → InvalidOptions before SQL', async () => {
    await fc.assert(
      fc.asyncProperty(fc.anything(), async (options) => {
        const { db, sent } = recorder();
        const result = await outcome(
          updateWhere(db, { text: 'UPDATE notes SET body = $1', values: ['x'] }, options as never),
        );
        const valid =
          options === undefined ||
          (typeof options === 'object' &&
            options !== null &&
            !Array.isArray(options) &&
            Object.keys(options).length === 0);
        if (!valid && result === 'InvalidOptions') expect(sent).toHaveLength(0);
        if (result !== 'InvalidOptions') expect(sent.length).toBeGreaterThan(0);
      }),
      { numRuns: 300 },
    );
  });

  it('on a real server, hostile values are stored verbatim (parameters), never executed', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc.constantFrom("'); DROP TABLE notes; --", '$1', '"; SELECT pg_sleep(10); --', '\\'),
        ),
        async (raw) => {
          const title = raw.replaceAll('\u0000', '');
          const r = await insertOnce<{ title: string }>(pool, {
            table: 'notes',
            values: { title, body: title },
            conflict: ['title'],
          });
          expect(r._unsafeUnwrap().row.title).toBe(title);
        },
      ),
      { numRuns: 100 },
    );
    const still = await pool.query("SELECT to_regclass('notes') IS NOT NULL AS here");
    expect(still.rows[0].here).toBe(true);
  });
});
