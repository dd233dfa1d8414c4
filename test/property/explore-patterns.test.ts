import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ExploreOptions, explore } from '../../src/testing/explore.js';
import type { StepOutcome } from '../../src/testing/schedule.js';
import { useTestDatabase } from '../helpers.js';

// Each pattern of the library against its naive version, over every interleaving of two sessions:
// exploration finds an interleaving that breaks the naive version's invariant, and none for the
// pattern.

const { url } = await useTestDatabase();

type Case = Omit<ExploreOptions, 'url' | 'sessions'>;

const failed = (outcomes: readonly StepOutcome[]): string | true => {
  const bad = outcomes.find((o) => o.status === 'error');
  return bad ? `step "${bad.sql}" of ${bad.session} failed with ${bad.code ?? bad.message}` : true;
};

// --- read-check-write: withdraw 70 from 100 only when the balance allows it -----------------------
const withdrawal: Case = {
  setup:
    'DROP TABLE IF EXISTS acct; CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO acct VALUES (1, 100)',
  invariant: async (db) => {
    const { rows } = await db.query('SELECT balance FROM acct WHERE id = 1');
    const balance = Number(rows[0]?.balance);
    return balance >= 0 || `the balance went negative: ${balance}`;
  },
};
// the check in the application (a session variable stands for it), then the write
const naiveWithdraw = [
  'begin',
  "select set_config('app.enough', (balance >= 70)::text, false) from acct where id = 1",
  "update acct set balance = balance - 70 where id = 1 and current_setting('app.enough')::boolean",
  'commit',
];
// updateWhere: the check and the write in one statement
const conditionalWithdraw = [
  'begin',
  'update acct set balance = balance - 70 where id = 1 and balance >= 70',
  'commit',
];

// --- transfers between two accounts, in opposite directions ---------------------------------------
const transfers: Case = {
  setup:
    'DROP TABLE IF EXISTS acct; CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO acct VALUES (1, 100), (2, 100)',
  sessionSetup: "SET deadlock_timeout = '20ms'",
  invariant: async (db, outcomes) => {
    const deadlock = failed(outcomes);
    if (deadlock !== true) return deadlock;
    const { rows } = await db.query('SELECT sum(balance)::int AS total FROM acct');
    return rows[0]?.total === 200 || `money was created or lost: ${rows[0]?.total}`;
  },
};
const transfer = (from: number, to: number, sorted: boolean) => [
  'begin',
  ...(sorted ? ['select id from acct where id in (1, 2) order by id for no key update'] : []),
  `update acct set balance = balance - 10 where id = ${from}`,
  `update acct set balance = balance + 10 where id = ${to}`,
  'commit',
];

// --- booking a room: no two overlapping bookings --------------------------------------------------
const bookings: Case = {
  setup:
    'DROP TABLE IF EXISTS booking; CREATE TABLE booking (id serial PRIMARY KEY, during int4range NOT NULL, CONSTRAINT no_overlap EXCLUDE USING gist (during WITH &&))',
  invariant: async (db) => {
    const { rows } = await db.query(
      'SELECT count(*)::int AS n FROM booking a JOIN booking b ON a.id < b.id AND a.during && b.during',
    );
    return rows[0]?.n === 0 || `${rows[0]?.n} pair(s) of overlapping bookings`;
  },
};
const naiveBookings: Case = {
  ...bookings,
  setup:
    'DROP TABLE IF EXISTS booking; CREATE TABLE booking (id serial PRIMARY KEY, during int4range NOT NULL)',
};
const book = (range: string) => [
  'begin',
  `select set_config('app.free', (count(*) = 0)::text, false) from booking where during && '${range}'::int4range`,
  `insert into booking (during) select '${range}'::int4range where current_setting('app.free')::boolean`,
  'commit',
];

// --- dequeue: each job claimed once ---------------------------------------------------------------
const queue: Case = {
  setup:
    "DROP TABLE IF EXISTS jobs; CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL, claims int NOT NULL DEFAULT 0); INSERT INTO jobs (id, state) VALUES (1, 'ready'), (2, 'ready')",
  invariant: async (db) => {
    const { rows } = await db.query('SELECT id, claims FROM jobs WHERE claims > 1');
    return rows.length === 0 || `job ${rows[0]?.id} was claimed ${rows[0]?.claims} times`;
  },
};
const naiveDequeue = [
  'begin',
  "select set_config('app.job', id::text, false) from jobs where state = 'ready' order by id limit 1",
  "update jobs set state = 'running', claims = claims + 1 where id = current_setting('app.job')::int",
  'commit',
];
const skipLockedDequeue = [
  'begin',
  "update jobs set state = 'running', claims = claims + 1 where id = (select id from jobs where state = 'ready' order by id limit 1 for update skip locked)",
  'commit',
];

describe('explore(): every interleaving of each pattern against its naive version', () => {
  it('read-check-write: the naive check-then-withdraw overdraws; the conditional UPDATE never does', async () => {
    const naive = await explore({ url, ...withdrawal, sessions: { t1: naiveWithdraw, t2: naiveWithdraw } });
    expect(naive).toMatchObject({ passed: false, exhaustive: true });
    expect(naive.counterexample?.reason).toBe('the balance went negative: -40');
    const pattern = await explore({
      url,
      ...withdrawal,
      sessions: { t1: conditionalWithdraw, t2: conditionalWithdraw },
    });
    expect(pattern).toMatchObject({ passed: true, exhaustive: true, runs: 20, interleavings: 20n });
  });

  it('transfers: unsorted row locks deadlock in some order; locking both rows in id order never does', async () => {
    const naive = await explore({
      url,
      ...transfers,
      sessions: { t1: transfer(1, 2, false), t2: transfer(2, 1, false) },
    });
    expect(naive.passed).toBe(false);
    expect(naive.counterexample?.reason).toMatch(/failed with 40P01$/);
    const pattern = await explore({
      url,
      ...transfers,
      sessions: { t1: transfer(1, 2, true), t2: transfer(2, 1, true) },
    });
    expect(pattern).toMatchObject({ passed: true, exhaustive: true, runs: 252 });
  });

  it('booking: check-then-insert double-books; the exclusion constraint refuses the second booking', async () => {
    const sessions = { t1: book('[10,12)'), t2: book('[11,13)') };
    const naive = await explore({ url, ...naiveBookings, sessions });
    expect(naive.passed).toBe(false);
    expect(naive.counterexample?.reason).toBe('1 pair(s) of overlapping bookings');
    const pattern = await explore({ url, ...bookings, sessions });
    expect(pattern).toMatchObject({ passed: true, runs: 70 });
  });

  it('dequeue: SELECT then UPDATE hands one job to two workers; one UPDATE … SKIP LOCKED never does', async () => {
    const naive = await explore({ url, ...queue, sessions: { w1: naiveDequeue, w2: naiveDequeue } });
    expect(naive.passed).toBe(false);
    expect(naive.counterexample?.reason).toBe('job 1 was claimed 2 times');
    const pattern = await explore({
      url,
      ...queue,
      sessions: { w1: skipLockedDequeue, w2: skipLockedDequeue },
    });
    expect(pattern).toMatchObject({ passed: true, runs: 20 });
  });

  it('reports the first failing order as a table, step by step', async () => {
    const naive = await explore({ url, ...withdrawal, sessions: { t1: naiveWithdraw, t2: naiveWithdraw } });
    expect(naive.counterexample?.table).toBe(
      [
        '0 t1: begin -> ok',
        "1 t1: select set_config('app.enough', (balance >= 70)::text, fals… -> ok [set_config=true]",
        '2 t2: begin -> ok',
        "3 t2: select set_config('app.enough', (balance >= 70)::text, fals… -> ok [set_config=true]",
        '4 t2: update acct set balance = balance - 70 where id = 1 and cur… -> ok 1 row',
        '5 t2: commit -> ok',
        '6 t1: update acct set balance = balance - 70 where id = 1 and cur… -> ok 1 row',
        '7 t1: commit -> ok',
        '=> the balance went negative: -40',
      ].join('\n'),
    );
    // the serial orders (1 switch) ran first and passed; this one has the fewest switches that fail
    expect(naive.counterexample).toMatchObject({ switches: 2, minimal: true });
    expect(naive.runs).toBe(4);
  });

  it('samples with fast-check beyond exhaustiveLimit, then reports a failing order with the fewest switches', async () => {
    const report = await explore({
      url,
      ...withdrawal,
      sessions: { t1: naiveWithdraw, t2: naiveWithdraw },
      exhaustiveLimit: 0,
      fc,
      numRuns: 40,
      seed: 7,
    });
    expect(report).toMatchObject({ passed: false, exhaustive: false });
    expect(report.counterexample?.reason).toBe('the balance went negative: -40');
    // t2 runs wholly between t1's check and its write: 2 switches, and none with fewer fails
    const order =
      report.counterexample?.interleaving.map(([s, step]) => `${s}:${String(step).slice(0, 6)}`) ?? [];
    expect(order.join(' ')).toBe(
      't1:begin t1:select t2:begin t2:select t2:update t2:commit t1:update t1:commit',
    );
    expect(report.counterexample).toMatchObject({ switches: 2, minimal: true });
  });

  it('the read-then-write lost update is reported with 2 context switches, whatever the seed', async () => {
    const seen: { seed: number; switches: number | undefined; runs: number }[] = [];
    for (let seed = 1; seed <= 20; seed++) {
      const report = await explore({
        url,
        ...withdrawal,
        sessions: { t1: naiveWithdraw, t2: naiveWithdraw },
        exhaustiveLimit: 0,
        fc,
        numRuns: 40,
        seed,
      });
      seen.push({ seed, switches: report.counterexample?.switches, runs: report.runs });
      expect(report.counterexample?.minimal).toBe(true);
    }
    expect(seen.filter((s) => s.switches !== 2)).toEqual([]);
  }, 120_000);
});
