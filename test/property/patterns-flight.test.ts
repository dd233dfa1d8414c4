import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FlightPart } from '../../src/tx/first-flight.js';
import { type FlightOutcome, sendFlight } from '../../src/tx/send-flight.js';
import { useTestDatabase } from '../helpers.js';

// Property: in a flight (statements ahead of a statement, the statement, statements behind it, up to
// ONE Sync), whichever statement fails, everything before it ran, nothing after it ran, and the outcome
// names the part it was in; without a failure, the result is the statement's own. What ran is read
// from sequences (nextval is not undone by a rollback): statement i advances sequence i. The flights
// run in autocommit, where the server's rule is the only thing that keeps a statement behind a failure
// from running. The naive control sends the same statements with pg's own pipelining (a Sync per
// query): the statements behind a failure run anyway.
const { pool, url } = await useTestDatabase();
const POSITIONS = 7;
const pipelined = new pg.Client({ connectionString: url, pipeline: true } as pg.ClientConfig);

beforeAll(async () => {
  for (let i = 0; i < POSITIONS; i++) await pool.query(`CREATE SEQUENCE fp_s${i}`);
  await pipelined.connect();
});

afterAll(async () => {
  await pipelined.end();
});

interface Case {
  /** How many statements go ahead of the statement; the statement is at this position. */
  readonly opening: number;
  readonly closing: number;
  /** Statements that take a value (one `$1`), by position. */
  readonly withValues: readonly boolean[];
  /** The position of the statement that fails, if any. */
  readonly fail: number | undefined;
}

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    opening: fc.nat({ max: 3 }),
    closing: fc.nat({ max: 3 }),
    withValues: fc.array(fc.boolean(), { minLength: POSITIONS, maxLength: POSITIONS }),
    fail: fc.option(fc.nat({ max: POSITIONS - 1 }), { nil: undefined, freq: 3 }),
  })
  .map((c) => ({ ...c, fail: c.fail === undefined ? undefined : c.fail % (c.opening + c.closing + 1) }));

/** Statement `i`: advances sequence i; the failing one divides by zero after that (at run time). */
function statementAt(c: Case, i: number): { text: string; values: unknown[] } {
  const value = c.withValues[i] === true || i === c.opening; // the flight's own statement takes a value
  const next = `nextval('fp_s${i}')`;
  const expression = i === c.fail ? `1 / (${next} * 0)` : next;
  return value
    ? { text: `SELECT ${expression} + $1::int AS n`, values: [i] }
    : { text: `SELECT ${expression} AS n`, values: [] };
}

function partOf(c: Case, i: number): FlightPart {
  return i < c.opening ? 'opening' : i === c.opening ? 'statement' : 'closing';
}

type Sender = (c: Case) => Promise<FlightOutcome<{ n: string }>>;

/** pg-txkit's flight on a pool client. */
const viaFlight: Sender = async (c) => {
  const around = (i: number) => {
    const s = statementAt(c, i);
    return s.values.length > 0 ? { text: s.text, values: s.values } : s.text;
  };
  const own = statementAt(c, c.opening);
  const client = await pool.connect();
  try {
    return await sendFlight<{ n: string }>(client, {
      opening: Array.from({ length: c.opening }, (_, i) => around(i)),
      text: own.text,
      values: own.values,
      closing: Array.from({ length: c.closing }, (_, k) => around(c.opening + 1 + k)),
    });
  } finally {
    client.release();
  }
};

/** The naive control: the same statements pipelined by pg, a Sync after each. */
const viaPipeline: Sender = async (c) => {
  const sent = Array.from({ length: c.opening + c.closing + 1 }, (_, i) => {
    const s = statementAt(c, i);
    return pipelined.query<{ n: string }>(s.text, s.values);
  });
  const settled = await Promise.allSettled(sent);
  const failed = settled.findIndex((s) => s.status === 'rejected');
  const own = settled[c.opening];
  if (failed !== -1) {
    return { ok: false, part: partOf(c, failed), error: (settled[failed] as PromiseRejectedResult).reason };
  }
  return { ok: true, result: (own as PromiseFulfilledResult<pg.QueryResult<{ n: string }>>).value };
};

async function holds(send: Sender, c: Case): Promise<boolean> {
  const total = c.opening + c.closing + 1;
  for (let i = 0; i < total; i++) await pool.query(`SELECT setval('fp_s${i}', 1, false)`);
  const outcome = await send(c);
  const ran: boolean[] = [];
  for (let i = 0; i < total; i++) {
    const { rows } = await pool.query<{ called: boolean }>(`SELECT is_called AS called FROM fp_s${i}`);
    ran.push(rows[0]?.called === true);
  }
  const expected = Array.from({ length: total }, (_, i) => c.fail === undefined || i <= c.fail);
  if (ran.some((r, i) => r !== expected[i])) return false;
  if (c.fail === undefined) {
    // The statement's own result: its one row (sequence value 1, plus its value).
    return (
      outcome.ok && outcome.result.rows.length === 1 && outcome.result.rows[0]?.n === String(1 + c.opening)
    );
  }
  return (
    !outcome.ok && outcome.part === partOf(c, c.fail) && (outcome.error as { code?: string }).code === '22012'
  );
}

describe('property: nothing behind a failing statement of a flight runs, and the part is named', () => {
  it('holds for the flight (one Sync)', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, (c) => holds(viaFlight, c)),
      { numRuns: 150 },
    );
  });

  it('naive control: a Sync per query (pg pipelining) runs the statements behind a failure', async () => {
    const result = await fc.check(
      fc.asyncProperty(caseArb, (c) => holds(viaPipeline, c)),
      { numRuns: 150 },
    );
    expect(result.failed).toBe(true);
    // The shrunk case: a failure with a statement behind it.
    const counterexample = result.counterexample?.[0];
    expect(counterexample?.fail).toBeDefined();
    expect(
      (counterexample?.fail ?? 0) < (counterexample?.opening ?? 0) + (counterexample?.closing ?? 0),
    ).toBe(true);
  });
});
