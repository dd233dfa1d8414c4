import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { beginStatements } from '../../src/tx/begin-sql.js';
import { type FirstFlightClass, firstFlightClass } from '../../src/tx/first-flight.js';
import type { Isolation } from '../../src/tx/index.js';
import { useTestDatabase } from '../helpers.js';

// Property: whatever the first statement and wherever the opening of the transaction is refused,
// nothing the first statement did outlives its transaction. Each case sends BEGIN (with random
// settings), its SET LOCALs and a random first statement, possibly with one opening statement replaced
// by one the server refuses (in BEGIN's place too), or a first statement that fails; then ROLLBACK.
// The table must be empty afterwards. The naive control writes the same statements with pg's own
// pipelining (a Sync per query): a refused BEGIN leaves the statement behind it to run in autocommit.
const { pool, url } = await useTestDatabase();
const pipelined = new pg.Client({ connectionString: url, pipeline: true } as pg.ClientConfig);

beforeAll(async () => {
  await pool.query('CREATE TABLE ffp (id int PRIMARY KEY, note text NOT NULL)');
  await pool.query('CREATE TABLE ffp_seed (id int PRIMARY KEY); INSERT INTO ffp_seed VALUES (1), (2), (3)');
  await pipelined.connect();
});

afterAll(async () => {
  await pipelined.end();
});

beforeEach(async () => {
  await pool.query('TRUNCATE ffp');
});

interface Case {
  readonly isolation: Isolation;
  readonly lockTimeout: number | undefined;
  readonly statementTimeout: number | undefined;
  readonly statement: { readonly text: string; readonly values: unknown[] };
  /** Which opening statement the server refuses (0: BEGIN itself), if any. */
  readonly refuse: number | undefined;
}

const statementArb = fc.oneof(
  fc
    .record({ id: fc.integer({ min: 1, max: 1000 }), note: fc.string({ maxLength: 20 }) })
    .map(({ id, note }) => ({ text: 'INSERT INTO ffp VALUES ($1, $2)', values: [id, note] })),
  fc
    .integer({ min: 1, max: 1000 })
    .map((id) => ({ text: 'INSERT INTO ffp SELECT id + $1, $1::text FROM ffp_seed', values: [id] })),
  fc.string({ maxLength: 10 }).map((note) => ({
    text: 'WITH w AS (INSERT INTO ffp VALUES (5000, $1) RETURNING id) SELECT count(*)::int AS n FROM w',
    values: [note],
  })),
  // A first statement that fails after writing: its row never stays.
  fc.constant({ text: "INSERT INTO ffp VALUES (1, 'a'), (1, 'b')", values: [] as unknown[] }),
);

const caseArb: fc.Arbitrary<Case> = fc.record({
  isolation: fc.constantFrom<Isolation>('read committed', 'repeatable read', 'serializable'),
  lockTimeout: fc.option(fc.integer({ min: 1, max: 10_000 }), { nil: undefined }),
  statementTimeout: fc.option(fc.integer({ min: 1000, max: 10_000 }), { nil: undefined }),
  statement: statementArb,
  refuse: fc.option(fc.nat({ max: 2 }), { nil: undefined, freq: 2 }),
});

/** The opening statements of a case, with the refused one replaced by one the server rejects. */
function openingOf(c: Case): string[] {
  const opening = beginStatements({
    isolation: c.isolation,
    readOnly: false,
    deferrable: false,
    lockTimeout: c.lockTimeout,
    statementTimeout: c.statementTimeout,
    idleInTransactionTimeout: undefined,
  });
  if (c.refuse !== undefined) opening[Math.min(c.refuse, opening.length - 1)] = 'SELECT 1 / 0';
  return opening;
}

type Sender = (opening: readonly string[], statement: Case['statement']) => Promise<void>;

/** pg-txkit's first flight: the opening statements and the statement up to ONE Sync. */
const viaFirstFlight: Sender = async (opening, statement) => {
  const client = await pool.connect();
  try {
    const Flight = firstFlightClass(client) as FirstFlightClass;
    await client
      .query(new Flight(opening, statement.text, statement.values) as unknown as pg.QueryConfig)
      .catch(() => {});
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
};

/** The naive control: the same statements pipelined by pg, a Sync after each. */
const viaPipeline: Sender = async (opening, statement) => {
  const sent = [
    ...opening.map((text) => pipelined.query(text)),
    pipelined.query(statement.text, statement.values),
  ];
  await Promise.allSettled(sent);
  await pipelined.query('ROLLBACK');
};

async function holds(send: Sender, c: Case): Promise<boolean> {
  await pool.query('TRUNCATE ffp');
  await send(openingOf(c), c.statement);
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM ffp');
  return rows[0]?.n === 0;
}

describe('property: the first statement never runs outside its transaction', () => {
  it('holds for the first flight (BEGIN, SET LOCALs and the statement up to one Sync)', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, (c) => holds(viaFirstFlight, c)),
      { numRuns: 150 },
    );
  });

  it('naive control: a Sync per query (pg pipelining) lets the statement run after a refused BEGIN', async () => {
    const result = await fc.check(
      fc.asyncProperty(caseArb, (c) => holds(viaPipeline, c)),
      { numRuns: 150 },
    );
    expect(result.failed).toBe(true);
    const counterexample = result.counterexample?.[0];
    // The shrunk case: the statement's row stayed because BEGIN (opening statement 0) was refused.
    expect(counterexample?.refuse).toBe(0);
  });
});
