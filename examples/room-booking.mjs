// Room booking with Bookings: an EXCLUDE USING gist constraint, half-open [from, to) periods.
//
//   npm run build && node examples/room-booking.mjs
//
// Proves: 12 concurrent overlapping requests for one room → one booking, Overlap (with the booking in
// the way) for the rest; back-to-back bookings do not overlap; move() is atomic; the naive
// "SELECT overlapping, then INSERT" double-books.
import pg from 'pg';
import { Bookings, TxManager } from '../dist/index.js';
import { startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 24 });
const tm = new TxManager(pool);
try {
  await pool.query(`DROP TABLE IF EXISTS ex_room_bookings, ex_room_bookings_naive;
    CREATE TABLE ex_room_bookings (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL, guest text);
    CREATE TABLE ex_room_bookings_naive (id serial PRIMARY KEY, room_id int NOT NULL, during tstzrange NOT NULL);`);
  const rooms = new Bookings({ table: 'ex_room_bookings', resource: 'room_id', during: 'during' });
  const table = await rooms.migrate(pool); // btree_gist + EXCLUDE (room_id WITH =, during WITH &&)
  if (table.isErr()) throw table.error;

  const at = (h, m = 0) => new Date(Date.UTC(2030, 0, 1, h, m));
  const requests = Array.from({ length: 12 }, (_, i) => ({
    guest: `g${i}`,
    from: at(10, i * 5),
    to: at(11, i * 5),
  }));
  const results = await Promise.all(
    requests.map((r) =>
      tm.do(async (tx) => {
        const booked = await rooms.book(tx, {
          resource: 7,
          from: r.from,
          to: r.to,
          values: { guest: r.guest },
        });
        if (booked.isErr() && booked.error.kind !== 'Overlap') throw booked.error; // 40P01 etc.: retry
        return booked;
      }),
    ),
  );
  const winners = results.filter((r) => r.isOk());
  const overlap = results.find((r) => r.isErr())?.error;
  console.log(`Bookings.book: ${winners.length} booking, ${results.length - winners.length} × Overlap`);
  console.log(
    `  an Overlap names the booking in the way: ${JSON.stringify(overlap?.conflicting.map((b) => b.guest))} (${overlap?.constraint})`,
  );

  const first = winners[0].value;
  const backToBack = await rooms.book(pool, { resource: 7, from: at(13), to: at(14) });
  const touching = await rooms.book(pool, { resource: 7, from: at(14), to: at(15) });
  console.log(
    `back-to-back [13:00,14:00) and [14:00,15:00): ${backToBack.isOk() && touching.isOk() ? 'both booked' : 'refused'}`,
  );
  const moved = await rooms.move(pool, first.id, { from: at(13, 30), to: at(14, 30) });
  console.log(
    `move onto an occupied period: ${moved.isErr() ? moved.error.kind : 'moved'} (nothing changed)`,
  );

  await Promise.all(
    requests.map(async (r) => {
      const seen = await pool.query(
        "SELECT 1 FROM ex_room_bookings_naive WHERE room_id = 7 AND during && tstzrange($1, $2, '[)')",
        [r.from, r.to],
      );
      await new Promise((resolve) => setTimeout(resolve, 2));
      if (seen.rowCount === 0) {
        await pool.query(
          "INSERT INTO ex_room_bookings_naive (room_id, during) VALUES (7, tstzrange($1, $2, '[)'))",
          [r.from, r.to],
        );
      }
    }),
  );
  const naive =
    await pool.query(`SELECT count(*)::int AS n FROM ex_room_bookings_naive a JOIN ex_room_bookings_naive b
    ON a.room_id = b.room_id AND a.id < b.id AND a.during && b.during`);
  console.log(`naive SELECT-then-INSERT: ${naive.rows[0].n} overlapping pairs of bookings`);
  await pool.query('DROP TABLE ex_room_bookings, ex_room_bookings_naive');
} finally {
  await pool.end();
  await server?.stop();
}
