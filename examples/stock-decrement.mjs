// Stock decrement with updateWhere: send the action, not the computed number.
//
//   npm run build && node examples/stock-decrement.mjs
//
// Proves: 60 concurrent orders of 1..3 units against a stock of 50 never oversell with
// `SET left_units = left_units - $1 WHERE left_units >= $1`; the naive read-check-write oversells.
import pg from 'pg';
import { updateWhere } from '../dist/index.js';
import { startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 24 });
try {
  await pool.query(`DROP TABLE IF EXISTS ex_stock;
    CREATE TABLE ex_stock (sku text PRIMARY KEY, left_units int NOT NULL);
    INSERT INTO ex_stock VALUES ('apple', 50), ('pear', 50);`);
  const orders = Array.from({ length: 60 }, (_, i) => (i % 3) + 1);

  let sold = 0;
  let refused = 0;
  await Promise.all(
    orders.map(async (qty) => {
      // One statement: the row lock serializes buyers, and a blocked UPDATE re-checks its WHERE.
      const r = await updateWhere(pool, {
        text: 'UPDATE ex_stock SET left_units = left_units - $2 WHERE sku = $1 AND left_units >= $2',
        values: ['apple', qty],
      });
      if (r.isOk()) sold += qty;
      else if (r.error.kind === 'ConditionFailed') refused++;
      else throw r.error;
    }),
  );

  let naiveSold = 0;
  await Promise.all(
    orders.map(async (qty) => {
      const { rows } = await pool.query("SELECT left_units FROM ex_stock WHERE sku = 'pear'");
      await new Promise((resolve) => setTimeout(resolve, 2));
      if (rows[0].left_units < qty) return;
      await pool.query("UPDATE ex_stock SET left_units = $1 WHERE sku = 'pear'", [rows[0].left_units - qty]);
      naiveSold += qty;
    }),
  );
  const left = (await pool.query("SELECT left_units FROM ex_stock WHERE sku = 'apple'")).rows[0].left_units;
  console.log(
    `updateWhere: sold ${sold} units, ${refused} orders refused (ConditionFailed), ${left} left; sold + left = ${sold + left} (stock 50)`,
  );
  console.log(
    `naive read-check-write: sold ${naiveSold} units out of a stock of 50 (oversold ${Math.max(0, naiveSold - 50)})`,
  );
  await pool.query('DROP TABLE ex_stock');
} finally {
  await pool.end();
  await server?.stop();
}
