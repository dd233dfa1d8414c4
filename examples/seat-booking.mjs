// Seat booking with updateWhere: the condition ("still free") lives in the UPDATE's WHERE.
//
//   npm run build && node examples/seat-booking.mjs
//
// Proves: 20 buyers racing for the same seat → exactly one ticket with updateWhere (the others get
// ConditionFailed); the naive "SELECT status, then UPDATE" sells the seat several times.
import pg from 'pg';
import { TxManager, updateWhere } from '../dist/index.js';
import { startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 24 });
const tm = new TxManager(pool);
try {
  await pool.query(`DROP TABLE IF EXISTS ex_seats, ex_tickets;
    CREATE TABLE ex_seats (id int PRIMARY KEY, status text NOT NULL DEFAULT 'free', customer int);
    CREATE TABLE ex_tickets (seat_id int NOT NULL, customer int NOT NULL, naive boolean NOT NULL);
    INSERT INTO ex_seats (id) VALUES (1), (2);`);

  const book = (seat, customer) =>
    tm.do(async (tx) => {
      const booked = await updateWhere(
        tx,
        {
          text: "UPDATE ex_seats SET status = 'booked', customer = $2 WHERE id = $1 AND status = 'free'",
          values: [seat, customer],
        },
        { notFound: { table: 'ex_seats', id: seat } },
      );
      if (booked.isErr()) return booked; // ConditionFailed (taken) or NotFound: rolls back, returned as Err
      await tx.query('INSERT INTO ex_tickets VALUES ($1, $2, false)', [seat, customer]);
      return 'ticket';
    });

  const naiveBook = async (seat, customer) => {
    const { rows } = await pool.query('SELECT status FROM ex_seats WHERE id = $1', [seat]);
    await new Promise((resolve) => setTimeout(resolve, 2));
    if (rows[0].status !== 'free') return;
    await pool.query("UPDATE ex_seats SET status = 'booked', customer = $2 WHERE id = $1", [seat, customer]);
    await pool.query('INSERT INTO ex_tickets VALUES ($1, $2, true)', [seat, customer]);
  };

  const buyers = Array.from({ length: 20 }, (_, i) => i);
  const results = await Promise.all(buyers.map((c) => book(1, c)));
  await Promise.all(buyers.map((c) => naiveBook(2, c)));
  const kinds = results.map((r) => (r.isOk() ? r.value : r.error.kind));
  console.log(
    `updateWhere: ${kinds.filter((k) => k === 'ticket').length} ticket, ${kinds.filter((k) => k === 'ConditionFailed').length} × ConditionFailed`,
  );
  const missing = await book(99, 1);
  console.log(`NotFound for a missing seat: ${missing.isErr() ? missing.error.kind : 'booked?'}`);
  const naive = await pool.query('SELECT count(*)::int AS n FROM ex_tickets WHERE naive');
  console.log(`naive SELECT-then-UPDATE: ${naive.rows[0].n} tickets sold for one seat`);
  await pool.query('DROP TABLE ex_seats, ex_tickets');
} finally {
  await pool.end();
  await server?.stop();
}
