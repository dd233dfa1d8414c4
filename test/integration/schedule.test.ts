import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatOutcomes } from '../../src/testing/format-outcomes.js';
import { allInterleavings } from '../../src/testing/interleavings.js';
import { Schedule, ScheduleError, type ScheduleOptions } from '../../src/testing/schedule.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();

beforeEach(async () => {
  await pool.query('DROP TABLE IF EXISTS acct; CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL)');
  await pool.query('INSERT INTO acct VALUES (1, 100), (2, 100), (3, 100)');
});

let schedule: Schedule<'t1' | 't2'> | undefined;
async function open(options: Omit<ScheduleOptions, 'sessions'> = {}) {
  schedule = await Schedule.open(url, { sessions: ['t1', 't2'], ...options });
  return schedule;
}
afterEach(async () => {
  await schedule?.close();
  schedule = undefined;
  // nothing left behind: no session of a schedule survives close()
  const { rows } = await pool.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'pg-txkit-schedule:%'",
  );
  expect(rows[0].n).toBe(0);
});

describe('Schedule (isolation tester semantics)', () => {
  it('reproduces a lost update at read committed: the second UPDATE blocks, then overwrites', async () => {
    const s = await open();
    const out = await s.run([
      ['t1', 'begin'],
      ['t2', 'begin'],
      ['t1', 'select balance from acct where id = 1'],
      ['t2', 'select balance from acct where id = 1'],
      ['t1', 'update acct set balance = $1 where id = 1', [100 - 30]],
      ['t2', 'update acct set balance = $1 where id = 1', [100 - 50]],
      ['t1', 'commit'],
      ['t2', 'commit'],
      ['t1', 'select balance from acct where id = 1'],
    ]);
    expect(s.table()).toBe(
      [
        '0 t1: begin -> ok',
        '1 t2: begin -> ok',
        '2 t1: select balance from acct where id = 1 -> ok [balance=100]',
        '3 t2: select balance from acct where id = 1 -> ok [balance=100]',
        '4 t1: update acct set balance = $1 where id = 1 -> ok 1 row',
        '5 t2: update acct set balance = $1 where id = 1 -> blocked, ok 1 row after 6',
        '6 t1: commit -> ok',
        '7 t2: commit -> ok',
        '8 t1: select balance from acct where id = 1 -> ok [balance=50]',
      ].join('\n'),
    );
    expect(out[5]).toEqual({
      session: 't2',
      sql: 'update acct set balance = $1 where id = 1',
      blocked: true,
      status: 'ok',
      rows: [],
      rowCount: 1,
      results: [{ command: 'UPDATE', rowCount: 1, columns: [], values: [] }],
      notices: [],
      notifications: [],
      noticesBeforeWaiting: 0,
      completedAfter: 6,
      completionOrder: 6,
    });
    // t1's withdrawal of 30 is lost: 100 - 30 - 50 would be 20
    expect(out[8]?.rows).toEqual([{ balance: 50 }]);
  });

  it('shows the prevention at repeatable read: the blocked UPDATE fails with 40001 once the first commits', async () => {
    const s = await open();
    const out = await s.run([
      ['t1', 'begin isolation level repeatable read'],
      ['t2', 'begin isolation level repeatable read'],
      ['t1', 'select balance from acct where id = 1'],
      ['t2', 'select balance from acct where id = 1'],
      ['t1', 'update acct set balance = 70 where id = 1'],
      ['t2', 'update acct set balance = 50 where id = 1'],
      ['t1', 'commit'],
      ['t2', 'rollback'],
    ]);
    expect(out[5]).toMatchObject({
      session: 't2',
      blocked: true,
      status: 'error',
      code: '40001',
      completedAfter: 6,
    });
    expect(out[6]).toMatchObject({ blocked: false, status: 'ok' });
    expect((await pool.query('SELECT balance FROM acct WHERE id = 1')).rows).toEqual([{ balance: 70 }]);
  });

  it('reproduces a deadlock: one of the two transactions gets 40P01 and the other goes on', async () => {
    const s = await open();
    const out = await s.run([
      // t2 runs the deadlock check first (its deadlock_timeout is shorter), so t2 is the victim
      ['t1', "begin; set local deadlock_timeout = '10s'"],
      ['t2', "begin; set local deadlock_timeout = '100ms'"],
      ['t1', 'update acct set balance = balance - 10 where id = 1'],
      ['t2', 'update acct set balance = balance - 10 where id = 2'],
      ['t1', 'update acct set balance = balance + 10 where id = 2'],
      ['t2', 'update acct set balance = balance + 10 where id = 1'],
      ['t1', 'commit'],
      ['t2', 'rollback'],
    ]);
    expect(out[4]).toMatchObject({ session: 't1', blocked: true, status: 'ok', rowCount: 1 });
    expect(out[5]).toMatchObject({ session: 't2', status: 'error', code: '40P01' });
    // both finished once the deadlock detector (in t2, after 100 ms) aborted t2, before step 6 was sent
    expect(out[4]?.completedAfter).toBe(5);
    expect(out[5]?.completedAfter).toBe(out[5]?.blocked ? 5 : undefined);
    expect(out[6]).toMatchObject({ session: 't1', status: 'ok' });
    const { rows } = await pool.query('SELECT id, balance FROM acct ORDER BY id');
    expect(rows).toEqual([
      { id: 1, balance: 90 },
      { id: 2, balance: 110 },
      { id: 3, balance: 100 },
    ]);
  });

  it('reports FOR UPDATE NOWAIT failing with 55P03 without blocking', async () => {
    const s = await open();
    const out = await s.run([
      ['t1', 'begin'],
      ['t1', 'select id from acct where id = 1 for update'],
      ['t2', 'begin'],
      ['t2', 'select id from acct where id = 1 for update nowait'],
      ['t2', 'rollback'],
      ['t1', 'commit'],
    ]);
    expect(out[3]).toMatchObject({ session: 't2', blocked: false, status: 'error', code: '55P03' });
    expect(out[3]?.completedAfter).toBeUndefined();
  });

  it('shows SKIP LOCKED returning a different row without blocking', async () => {
    const s = await open();
    const claim = 'select id from acct order by id limit 1 for update skip locked';
    const out = await s.run([
      ['t1', 'begin'],
      ['t2', 'begin'],
      ['t1', claim],
      ['t2', claim],
      ['t1', 'commit'],
      ['t2', 'commit'],
    ]);
    expect(out[2]).toMatchObject({ blocked: false, status: 'ok', rows: [{ id: 1 }] });
    expect(out[3]).toMatchObject({ blocked: false, status: 'ok', rows: [{ id: 2 }] });
  });

  it('detects advisory-lock waits as blocked', async () => {
    const s = await open();
    const out = await s.run([
      ['t1', 'begin'],
      ['t1', 'select pg_advisory_xact_lock(42)'],
      ['t2', 'select pg_advisory_lock(42)'],
      ['t1', 'commit'],
      ['t2', 'select pg_advisory_unlock(42) as released'],
    ]);
    expect(out[2]).toMatchObject({ blocked: true, status: 'ok', completedAfter: 3 });
    expect(out[4]?.rows).toEqual([{ released: true }]);
  });

  it('waits for a blocked step before sending the next step of the same session', async () => {
    const s = await open();
    const out = await s.run([
      ['t1', 'begin'],
      ['t1', "select id from acct where id = 1 for update; set local lock_timeout = '10s'"],
      ['t2', "set lock_timeout = '500ms'"],
      ['t2', 'update acct set balance = 0 where id = 1'],
      ['t2', 'select 1 as next'], // t2 is still waiting: the schedule waits for lock_timeout to fire
      ['t1', 'commit'],
    ]);
    expect(out[3]).toMatchObject({ blocked: true, status: 'error', code: '55P03', completedAfter: 3 });
    expect(out[4]).toMatchObject({ blocked: false, status: 'ok', rows: [{ next: 1 }] });
  });

  it('fails with an error naming the step when a step neither finishes nor blocks in time', async () => {
    const s = await open({ stepTimeoutMs: 200 });
    const error = await s
      .run([
        ['t1', 'select 1'],
        ['t2', 'select pg_sleep(30)'],
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ScheduleError);
    expect((error as ScheduleError).step).toBe(1);
    expect((error as ScheduleError).message).toContain(
      'step 1 (t2: select pg_sleep(30)) neither finished nor blocked',
    );
    await expect(s.run([['t1', 'select 1']])).rejects.toThrow(/unusable/);
  });

  it('fails naming a step that stays blocked at the end of the schedule', async () => {
    const s = await open({ blockTimeoutMs: 300 });
    const error = await s
      .run([
        ['t1', 'begin'],
        ['t1', 'lock table acct'],
        ['t2', 'select count(*) from acct'],
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ScheduleError);
    expect((error as ScheduleError).message).toMatch(
      /step 2 \(t2: select count\(\*\) from acct\) is still blocked/,
    );
  });

  it('refuses unknown sessions and bad options before sending anything', async () => {
    await expect(Schedule.open(url, { sessions: [] })).rejects.toMatchObject({ kind: 'InvalidOptions' });
    await expect(Schedule.open(url, { sessions: ['a', 'a'] })).rejects.toMatchObject({
      kind: 'InvalidOptions',
    });
    const s = await open();
    // @ts-expect-error t3 is not a session of this schedule
    await expect(s.run([['t3', 'select 1']])).rejects.toThrow(/unknown session "t3"/);
    const out = await s.run([['t1', 'select $1::int as v', [7]]]);
    expect(formatOutcomes(out)).toBe('0 t1: select $1::int as v -> ok [v=7]');
    expect(s.pid('t1')).not.toBe(s.pid('t2'));
  });

  it("whenSessionBlocked: 'error' refuses at once a step for a blocked session (an impossible order)", async () => {
    const s = await open({ whenSessionBlocked: 'error' });
    const error = await s
      .run([
        ['t1', 'begin'],
        ['t1', 'select id from acct where id = 1 for update'],
        ['t2', 'update acct set balance = 0 where id = 1'],
        ['t2', 'select 1'],
        ['t1', 'commit'],
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ScheduleError);
    expect(error).toMatchObject({ step: 3, reason: 'session-blocked' });
    expect((error as Error).message).toContain(
      'session t2 is blocked in step 2 (t2: update acct set balance = 0',
    );
  });

  it("whenSessionBlocked: 'defer' sends a blocked session's next steps once it is free, as a real client would", async () => {
    const s = await open({ whenSessionBlocked: 'defer' });
    await s.run([
      ['t1', 'begin'],
      ['t2', 'begin'],
      ['t1', 'select balance from acct where id = 1 for update'],
      ['t2', 'select balance from acct where id = 1 for update'],
      ['t2', 'update acct set balance = balance - 50 where id = 1'],
      ['t2', 'commit'],
      ['t1', 'update acct set balance = balance - 30 where id = 1'],
      ['t1', 'commit'],
    ]);
    expect(s.table()).toBe(
      [
        '0 t1: begin -> ok',
        '1 t2: begin -> ok',
        '2 t1: select balance from acct where id = 1 for update -> ok [balance=100]',
        '3 t2: select balance from acct where id = 1 for update -> blocked, ok [balance=70] after 7',
        '4 t2: update acct set balance = balance - 50 where id = 1 -> sent after 7, ok 1 row',
        '5 t2: commit -> sent after 4, ok',
        '6 t1: update acct set balance = balance - 30 where id = 1 -> ok 1 row',
        '7 t1: commit -> ok',
      ].join('\n'),
    );
    expect((await pool.query('SELECT balance FROM acct WHERE id = 1')).rows).toEqual([{ balance: 20 }]);
  });

  describe('every interleaving of two read-modify-write transactions (exhaustive, with a naive control)', () => {
    // Each session withdraws 10 from 100 by reading the balance into a session variable, then writing
    // it back minus 10. Serially the result is 80; 90 means one withdrawal was lost.
    const session = (read: string) => [
      'begin',
      `select set_config('app.read', balance::text, false) from acct where id = 1 ${read}`,
      "update acct set balance = current_setting('app.read')::int - 10 where id = 1",
      'commit',
    ];

    async function lostUpdates(read: string): Promise<{ runs: number; lost: number }> {
      const merges = allInterleavings({ t1: session(read), t2: session(read) });
      const s = await open({ whenSessionBlocked: 'defer' });
      let lost = 0;
      for (const merged of merges) {
        await pool.query('UPDATE acct SET balance = 100 WHERE id = 1');
        const out = await s.run(merged);
        expect(out.every((o) => o.status === 'ok')).toBe(true);
        const { rows } = await pool.query('SELECT balance FROM acct WHERE id = 1');
        if (rows[0].balance !== 80) lost++;
      }
      return { runs: merges.length, lost };
    }

    it('naive control: a plain SELECT loses an update in some interleavings', async () => {
      const { runs, lost } = await lostUpdates('');
      expect(runs).toBe(70);
      expect(lost).toBeGreaterThan(0);
    });

    it('SELECT … FOR UPDATE: no interleaving loses an update', async () => {
      const { runs, lost } = await lostUpdates('for update');
      expect(runs).toBe(70);
      expect(lost).toBe(0);
    });
  });
});

// Where the Schedule must behave exactly as PostgreSQL's isolationtester does, so that the outcome of
// a schedule never depends on timing.
describe('Schedule: fidelity to the isolation tester', () => {
  it('sends an empty step (the isolation tester idiom `step s1noop { }`) and waits for the session first', async () => {
    const s = await open();
    const out = await s.run([
      ['t1', 'begin'],
      ['t1', 'select balance from acct where id = 1 for update'],
      ['t2', "set lock_timeout = '300ms'"],
      ['t2', 'update acct set balance = 0 where id = 1'],
      ['t2', ''], // waits until the blocked update has finished (here: its lock_timeout)
      ['t1', 'commit'],
    ]);
    expect(out[3]).toMatchObject({ blocked: true, status: 'error', code: '55P03', completedAfter: 3 });
    expect(out[4]).toMatchObject({
      session: 't2',
      sql: '',
      blocked: false,
      status: 'ok',
      rows: [],
      rowCount: null,
    });
  });

  it("records a waiter released by another step's ERROR after that very step, every time", async () => {
    // t1 creates many temporary tables before it fails: aborting it then takes a while, and its row
    // lock is only released once the abort is done (after the ErrorResponse, before ReadyForQuery).
    const s = await open();
    for (let round = 0; round < 5; round++) {
      const out = await s.run([
        ['t1', 'begin'],
        [
          't1',
          "do $$ begin for i in 1..800 loop execute format('create temp table tmp_%s (x int)', i); end loop; end $$",
        ],
        ['t1', 'update acct set balance = balance + 1 where id = 1'],
        ['t2', 'update acct set balance = balance + 1 where id = 1'], // waits for t1
        ['t1', 'select 1 / 0'], // fails: t1 aborts and releases the row lock
        ['t1', 'rollback'],
      ]);
      expect(out[4]).toMatchObject({ status: 'error', code: '22012' });
      expect(out[3]).toMatchObject({ blocked: true, status: 'ok', completedAfter: 4 });
    }
  });

  it('after waiting for its own blocked step (a deadlock victim), completes the other released waiters before the next step', async () => {
    const s = await open();
    for (let round = 0; round < 3; round++) {
      const out = await s.run([
        // t1 runs the deadlock check first (its deadlock_timeout is shorter): t1 is the victim. Not
        // shorter than 1 s: t2's step 5 must be seen waiting before the check ends the cycle (with
        // 50 ms a loaded machine missed it, and step 5 was recorded as not blocked)
        ['t1', "begin; set local deadlock_timeout = '1s'"],
        ['t2', "begin; set local deadlock_timeout = '10s'"],
        ['t1', 'update acct set balance = balance - 10 where id = 1'],
        ['t2', 'update acct set balance = balance - 10 where id = 2'],
        ['t1', 'update acct set balance = balance + 10 where id = 2'], // waits for t2
        ['t2', 'update acct set balance = balance + 10 where id = 1'], // waits for t1: a cycle
        ['t1', 'rollback'], // waits for step 4 (the victim); t2's step 5 is released meanwhile
        ['t2', 'commit'],
      ]);
      expect(out[4]).toMatchObject({ blocked: true, status: 'error', code: '40P01', completedAfter: 5 });
      expect(out[5]).toMatchObject({ blocked: true, status: 'ok', rowCount: 1, completedAfter: 5 });
    }
  });

  it("does not count the monitor's own connection as a blocker (CREATE INDEX CONCURRENTLY waits for older snapshots)", async () => {
    const s = await open({ pollMs: 1 });
    for (let round = 0; round < 150; round++) {
      const out = await s.run([
        ['t1', 'create index concurrently acct_balance on acct (balance)'],
        ['t1', 'drop index acct_balance'],
      ]);
      expect(out.map((o) => [o.status, o.blocked])).toEqual([
        ['ok', false],
        ['ok', false],
      ]);
    }
  });

  it('counts only its own sessions as blockers by default, and any other backend with `blockers: "any"`', async () => {
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT balance FROM acct WHERE id = 1 FOR UPDATE');
      const strict = await open({ stepTimeoutMs: 300 });
      await expect(strict.run([['t1', 'update acct set balance = 0 where id = 1']])).rejects.toMatchObject({
        reason: 'step-timeout',
      });
      await strict.close();
      const any = await open({ blockers: 'any' });
      await holder.query('SELECT pg_advisory_lock(4242)'); // a session lock, kept after COMMIT
      const running = any.run([
        ['t1', 'update acct set balance = 0 where id = 1'], // blocked by the holder's row lock
        ['t2', 'select pg_advisory_lock(4242)'], // sent only once step 0 was seen blocked
      ]);
      // t2 waiting means the schedule already went past step 0: then the holder lets both go
      await new Promise<void>((resolve, reject) => {
        const check = async (): Promise<void> => {
          const { rows } = await pool.query('SELECT cardinality(pg_blocking_pids($1)) AS n', [any.pid('t2')]);
          if (rows[0].n > 0) resolve();
          else setImmediate(() => check().catch(reject));
        };
        check().catch(reject);
      });
      await holder.query('COMMIT');
      await holder.query('SELECT pg_advisory_unlock(4242)');
      const out = await running;
      expect(out[1]).toMatchObject({ status: 'ok' }); // blocked or not: the holder may let go before the monitor looks
      expect(out[0]).toMatchObject({ blocked: true, status: 'ok', rowCount: 1 });
      await any.run([['t2', 'select pg_advisory_unlock(4242)']]);
    } finally {
      holder.release();
    }
  });
});
