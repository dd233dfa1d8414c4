// "At least one doctor on call": an invariant over a SET of rows. No row lock or constraint expresses
// it, so every transaction that touches it runs at serializable, and tm.do retries 40001.
//
//   npm run build && node examples/on-call-doctors.mjs
//
// Proves: two doctors asking to go off call at the same moment (both read "2 on call") both succeed at
// read committed and at repeatable read — nobody is on call (write skew). At serializable one of them
// gets 40001, tm.do re-runs its callback, it now sees 1 on call and is refused. The report runs
// READ ONLY DEFERRABLE: a consistent snapshot that never fails with 40001.
import { err, ok } from 'neverthrow';
import pg from 'pg';
import { ConditionFailed, TxManager } from '../dist/index.js';
import { gate, startPostgres } from '../dist/testing/index.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? server?.url, max: 8 });
let retries = 0;
const tm = new TxManager(pool, { hooks: { onRetry: () => void retries++ } });
try {
  await pool.query(`DROP TABLE IF EXISTS ex_doctors;
    CREATE TABLE ex_doctors (shift int, name text, on_call boolean NOT NULL, PRIMARY KEY (shift, name))`);

  /** The rule lives in the application: go off call only if someone else stays on call. */
  const goOffCall = (name, g) => async (tx) => {
    const { rows } = await tx.query('SELECT count(*)::int AS n FROM ex_doctors WHERE shift = 1 AND on_call');
    if (tx.attempt === 1) await g.at('read'); // force the race: both read before either writes
    if (rows[0].n < 2) return err(new ConditionFailed());
    await tx.query('UPDATE ex_doctors SET on_call = false WHERE shift = 1 AND name = $1', [name]);
    return ok(`${name} is off call`);
  };

  for (const isolation of ['read committed', 'repeatable read', 'serializable']) {
    await pool.query(
      "DELETE FROM ex_doctors; INSERT INTO ex_doctors VALUES (1, 'alice', true), (1, 'bob', true)",
    );
    retries = 0;
    const g = gate();
    const both = [tm.do(goOffCall('alice', g), { isolation }), tm.do(goOffCall('bob', g), { isolation })];
    await g.reached('read', 2);
    g.open('read');
    const results = await Promise.all(both);
    const report = await tm.do(
      async (tx) =>
        (await tx.query('SELECT count(*)::int AS n FROM ex_doctors WHERE shift = 1 AND on_call')).rows[0].n,
      { isolation: 'serializable', readOnly: true, deferrable: true },
    );
    const outcomes = results.map((r) => (r.isOk() ? r.value : r.error.kind));
    console.log(
      `${isolation.padEnd(15)} → ${JSON.stringify(outcomes)}, retries ${retries}, on call now: ${report.isOk() ? report.value : report.error.kind}${report.isOk() && report.value === 0 ? '  ← invariant broken' : ''}`,
    );
  }
  await pool.query('DROP TABLE ex_doctors');
} finally {
  await pool.end();
  await server?.stop();
}
