// "No more guests than seats": a count over a set of rows, kept by serializable + retry.
//
//   npm run build && node examples/room-capacity.mjs
//
// Proves: 10 concurrent registrations for a room of capacity 4 → all 10 registered at read committed
// (everyone counted before anyone inserted), exactly 4 at serializable (the rest are retried, then
// refused with ConditionFailed). An index on guests(room_id) keeps SSI's predicate locks narrow.
import { err, ok } from 'neverthrow';
import pg from 'pg';
import { ConditionFailed, TxManager } from '../dist/index.js';
import { gate, startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 16 });
const tm = new TxManager(pool, { defaults: { maxAttempts: 20, backoff: { baseMs: 1, capMs: 20 } } });
try {
  await pool.query(`DROP TABLE IF EXISTS ex_guests, ex_rooms;
    CREATE TABLE ex_rooms (id int PRIMARY KEY, capacity int NOT NULL);
    CREATE TABLE ex_guests (id serial PRIMARY KEY, room_id int NOT NULL REFERENCES ex_rooms, name text);
    CREATE INDEX ON ex_guests (room_id);
    INSERT INTO ex_rooms VALUES (1, 4);`);

  const register = (name, g) => async (tx) => {
    const { rows } = await tx.query(
      'SELECT (SELECT count(*)::int FROM ex_guests WHERE room_id = 1) AS n, capacity FROM ex_rooms WHERE id = 1',
    );
    if (tx.attempt === 1) await g.at('counted');
    if (rows[0].n >= rows[0].capacity) return err(new ConditionFailed());
    await tx.query('INSERT INTO ex_guests (room_id, name) VALUES (1, $1)', [name]);
    return ok(name);
  };

  for (const isolation of ['read committed', 'serializable']) {
    await pool.query('TRUNCATE ex_guests');
    const g = gate();
    const all = Array.from({ length: 10 }, (_, i) => tm.do(register(`guest${i}`, g), { isolation }));
    await g.reached('counted', 10);
    g.open('counted');
    const results = await Promise.all(all);
    const n = (await pool.query('SELECT count(*)::int AS n FROM ex_guests')).rows[0].n;
    const refused = results.filter((r) => r.isErr()).map((r) => r.error.kind);
    console.log(
      `${isolation.padEnd(15)} → ${n} guests in a room for 4; refused: ${refused.length} ${JSON.stringify([...new Set(refused)])}`,
    );
  }
  await pool.query('DROP TABLE ex_guests, ex_rooms');
} finally {
  await pool.end();
  await server?.stop();
}
