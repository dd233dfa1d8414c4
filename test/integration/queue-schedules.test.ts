import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue, type ScheduleDefinition, scheduledTick } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually, untilServerPasses } from '../fixtures/queue-helpers.js';
import { type Replica, replica, serverHour, setNextRun } from '../fixtures/schedule-helpers.js';
import { useTestDatabase, viaPgBouncer } from '../helpers.js';

const { pool, pooledUrl: url } = await useTestDatabase({ max: 10 });
// Through PgBouncer in transaction mode (the pgbouncer project) the replicas go through the pooler too;
// LISTEN needs a session of its own there, so their workers poll.
const listen = viaPgBouncer() === undefined;
const tm = new TxManager(pool);
const tasks = { ping: z.object({ v: z.number().default(1) }), publish: z.object({ post: z.number() }) };
type Tasks = typeof tasks;
const replicas: Replica<Tasks>[] = [];
afterAll(async () => {
  await Promise.all(replicas.map((r) => r.pool.end()));
});
let seq = 0;

function replicasOf(
  n: number,
  schema: string,
  schedules: Record<string, ScheduleDefinition<keyof Tasks & string>>,
) {
  const made = Array.from({ length: n }, () => replica<Tasks>(url, { schema, tasks, schedules }));
  replicas.push(...made);
  return made;
}

async function freshSchema(schedules: Record<string, ScheduleDefinition<keyof Tasks & string>> = {}) {
  const schema = `q_sched_${++seq}`;
  const q = new Queue({ pool, txManager: tm, schema, tasks, schedules });
  (await q.migrate())._unsafeUnwrap();
  return { schema, q };
}

/** Waits until a schedule pass's placeholder INSERT waits on a row lock (seen from pg_stat_activity). */
async function placeholderInsertWaits(): Promise<void> {
  await eventually(async () => {
    const w = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO%schedules (name, hash, definition)%'`,
    );
    return (w.rows[0]?.n ?? 0) > 0;
  });
}

async function jobKeys(schema: string): Promise<string[]> {
  const r = await pool.query<{ key: string }>(`SELECT key FROM ${schema}.jobs ORDER BY key`);
  return r.rows.map((x) => x.key);
}

describe('schedules: each tick fires exactly once across replicas', () => {
  it('five replicas passing at once over six due ticks: six jobs, each tick reported by one replica', async () => {
    const def = { every: '1h', task: 'ping', missed: { catchUp: 10 }, grace: '1d' } as const;
    const { schema } = await freshSchema();
    const rs = replicasOf(5, schema, { hourly: def });
    (await rs[0]!.queue.fireSchedules())._unsafeUnwrap(); // declares: the row exists, next run = next hour
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 5)); // six ticks due: 5h ago … this hour
    const passes = await Promise.all(rs.map((r) => r.queue.fireSchedules()));
    const fired = passes.flatMap((p) => p._unsafeUnwrap().fired);
    expect(fired).toHaveLength(6);
    expect(new Set(fired.map((f) => f.tick.toISOString())).size).toBe(6);
    expect(fired.every((f) => f.jobId !== null)).toBe(true);
    const keys = await jobKeys(schema);
    expect(keys).toHaveLength(6);
    expect(keys.every((k) => scheduledTick({ key: k }) !== undefined)).toBe(true);
    const [state] = (await rs[1]!.queue.listSchedules())._unsafeUnwrap();
    expect(state?.fired).toBe(6);
    expect(state?.nextRunAt?.getTime()).toBe((await serverHour(pool, -1)).getTime());
  });

  it('next_run_at is persisted: a replica started later (a new process) does not fire a tick again', async () => {
    const { schema } = await freshSchema();
    const [a] = replicasOf(1, schema, { hourly: { every: '1h', task: 'ping', missed: 'once' } });
    (await a!.queue.fireSchedules())._unsafeUnwrap();
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 0));
    expect((await a!.queue.fireSchedules())._unsafeUnwrap().fired).toHaveLength(1);
    const [b] = replicasOf(1, schema, { hourly: { every: '1h', task: 'ping', missed: 'once' } });
    const again = (await b!.queue.fireSchedules())._unsafeUnwrap();
    expect(again.fired).toEqual([]);
    expect(again.redefined).toEqual([]); // same definition: nothing rewritten
    expect(await jobKeys(schema)).toHaveLength(1);
  });

  it('workers fire the ticks; when the replica that fired the last tick stops, another fires the next', async () => {
    const { schema } = await freshSchema();
    const def = { every: '1s', task: 'ping', grace: '1m' } as const;
    const rs = replicasOf(3, schema, { beat: def });
    const ran: { tick: string; by: number }[] = [];
    const firedBy: number[] = [];
    const workers = rs.map((r, i) =>
      r.queue.work(
        {
          ping: async (job) => {
            ran.push({ tick: scheduledTick(job)?.toISOString() ?? '?', by: i });
          },
        },
        {
          listen,
          scheduleInterval: 20,
          hooks: { onScheduleFired: (f) => f.jobId !== null && firedBy.push(i) },
        },
      ),
    );
    await eventually(() => firedBy.length >= 2, 10_000);
    const stopped = firedBy[firedBy.length - 1]!;
    await workers[stopped]!.stop();
    const before = firedBy.length;
    await eventually(() => firedBy.length >= before + 2, 10_000);
    await Promise.all(workers.map((w) => w.stop()));
    expect(firedBy.slice(before).every((i) => i !== stopped)).toBe(true);
    const ticks = ran.map((r) => r.tick);
    expect(new Set(ticks).size).toBe(ticks.length); // no tick ran twice
    expect(ticks.length).toBeGreaterThanOrEqual(3);
  });
});

describe('schedules: missed ticks (no replica was up)', () => {
  it("'skip', 'once' and { catchUp: 2 } after five hours down", async () => {
    const base = { every: '1h', task: 'ping', grace: 0 } as const;
    const schedules = {
      skipper: { ...base, missed: 'skip' },
      oncer: { ...base, missed: 'once' },
      catcher: { ...base, missed: { catchUp: 2 } },
    } as const;
    const { schema } = await freshSchema();
    const [r] = replicasOf(1, schema, schedules);
    (await r!.queue.fireSchedules())._unsafeUnwrap();
    const fiveAgo = await serverHour(pool, 4); // ticks 4h ago … this hour's: five, all older than grace 0
    for (const name of Object.keys(schedules)) await setNextRun(pool, schema, name, fiveAgo);
    const pass = (await r!.queue.fireSchedules({ declare: false }))._unsafeUnwrap();
    const by = (name: string) => pass.fired.filter((f) => f.schedule === name).map((f) => f.tick.getTime());
    expect(by('skipper')).toEqual([]);
    expect(by('oncer')).toEqual([(await serverHour(pool, 0)).getTime()]);
    expect(by('catcher')).toEqual([
      (await serverHour(pool, 1)).getTime(),
      (await serverHour(pool, 0)).getTime(),
    ]);
    expect(pass.skipped).toBe(5 + 4 + 3);
    const next = (await serverHour(pool, -1)).getTime();
    const states = (await r!.queue.listSchedules())._unsafeUnwrap();
    expect(states.map((s) => s.nextRunAt?.getTime())).toEqual([next, next, next]);
  });
});

describe('schedules: deploys change and remove definitions safely while versions overlap', () => {
  const v1 = { every: '1h', task: 'ping', payload: { v: 1 }, missed: 'once' } as const;
  const v2 = { every: '1h', task: 'ping', payload: { v: 2 }, missed: 'once' } as const;

  async function payloads(schema: string): Promise<number[]> {
    const r = await pool.query<{ v: number }>(
      `SELECT (payload->>'v')::int AS v FROM ${schema}.jobs ORDER BY id`,
    );
    return r.rows.map((x) => x.v);
  }

  it('the newest deploy wins whatever the order old and new replicas declare in; old replicas fire it', async () => {
    const { schema } = await freshSchema();
    const [old] = replicasOf(1, schema, { hourly: v1 });
    (await old!.queue.fireSchedules())._unsafeUnwrap();
    const [fresh] = replicasOf(1, schema, { hourly: v2 });
    expect((await fresh!.queue.fireSchedules())._unsafeUnwrap().redefined).toEqual(['hourly']);
    // The old version keeps running and declaring: it does not write its definition back.
    expect((await old!.queue.fireSchedules())._unsafeUnwrap().redefined).toEqual([]);
    expect((await fresh!.queue.fireSchedules())._unsafeUnwrap().redefined).toEqual([]);
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 0));
    expect((await old!.queue.fireSchedules())._unsafeUnwrap().fired).toHaveLength(1);
    expect(await payloads(schema)).toEqual([2]); // fired by the old replica, with the new definition
    // Rolled back: once no live replica declares v2 any more, v1 (still declared) is in force again.
    await pool.query(
      `UPDATE ${schema}.schedule_declarations SET last_declared_at = now() - interval '1 hour' WHERE hash = $1`,
      [fresh!.queue.declaredSchedules[0]!.hash],
    );
    expect((await old!.queue.fireSchedules())._unsafeUnwrap().redefined).toEqual(['hourly']);
    await pool.query(`DELETE FROM ${schema}.jobs`); // the v2 job ran (a done job leaves the table)
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 0));
    (await old!.queue.fireSchedules())._unsafeUnwrap();
    expect(await payloads(schema)).toEqual([1]);
  });

  it('a removed schedule runs while an old replica still declares it, and is disabled once none does', async () => {
    const { schema } = await freshSchema();
    const [old] = replicasOf(1, schema, { hourly: v1 });
    const [fresh] = replicasOf(1, schema, {}); // the new version removed it
    (await old!.queue.fireSchedules())._unsafeUnwrap();
    expect((await fresh!.queue.fireSchedules())._unsafeUnwrap().disabled).toEqual([]);
    await pool.query(
      `UPDATE ${schema}.schedule_declarations SET last_declared_at = now() - interval '1 hour'`,
    );
    expect((await fresh!.queue.fireSchedules())._unsafeUnwrap().disabled).toEqual(['hourly']);
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 0)); // would be due if enabled
    expect((await fresh!.queue.fireSchedules({ declare: false }))._unsafeUnwrap().fired).toEqual([]);
    const [state] = (await fresh!.queue.listSchedules())._unsafeUnwrap();
    expect(state?.enabled).toBe(false);
    expect(await jobKeys(schema)).toEqual([]);
  });
});

describe('schedules: the jobs of a tick go through the one insert', () => {
  it("a tick's job has the schedule's group and priority, and counts against the group's limit", async () => {
    const schema = `q_sched_${++seq}`;
    const q = new Queue({
      pool,
      txManager: tm,
      schema,
      tasks,
      groups: { default: { concurrency: 1 } },
      schedules: {
        hourly: { every: '1h', task: 'ping', missed: { catchUp: 3 }, grace: '1d', group: 'g', priority: -7 },
      },
    });
    (await q.migrate())._unsafeUnwrap();
    (await q.fireSchedules())._unsafeUnwrap();
    await setNextRun(pool, schema, 'hourly', new Date(Date.now() - 2 * 3_600_000 - 60_000));
    const pass = (await q.fireSchedules())._unsafeUnwrap();
    expect(pass.fired.length).toBeGreaterThanOrEqual(2);
    // One group slot: one of the tick jobs at a time.
    const claimed = (await q.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed).toHaveLength(1);
    expect(claimed[0]).toMatchObject({ group: 'g', priority: -7, payload: { v: 1 } });
    const all = await pool.query(`SELECT DISTINCT group_key, priority FROM ${schema}.jobs`);
    expect(all.rows).toEqual([{ group_key: 'g', priority: -7 }]);
  });

  it('a group that cannot be stored (empty, NUL) is refused at definition: InvalidOptions, nothing sent', () => {
    for (const group of ['', 'a\u0000b']) {
      expect(
        () =>
          new Queue({
            pool,
            txManager: tm,
            schema: 'q_never',
            tasks,
            schedules: { s: { every: '1h', task: 'ping', group } },
          }),
      ).toThrow(expect.objectContaining({ kind: 'InvalidOptions' }));
    }
  });
});

describe('schedules: bad input is refused before anything is sent', () => {
  it('the Queue constructor throws InvalidOptions naming each bad schedule; no SQL sent', () => {
    const sent: unknown[] = [];
    const spy = {
      connect: () => sent.push('connect'),
      query: (q: unknown) => sent.push(q),
    } as unknown as pg.Pool;
    const build = () =>
      new Queue({
        pool: spy,
        txManager: tm,
        tasks,
        schedules: {
          a: { cron: '0 25 * * *', task: 'ping' },
          b: { every: '1h', task: 'ping', tz: 'Europe/Paris' },
          c: { every: '1h', task: 'publish', payload: { post: 'x' } },
        },
        requires: { nope: ['x'] } as never,
      });
    expect(build).toThrowError(expect.objectContaining({ kind: 'InvalidOptions' }));
    expect(sent).toEqual([]);
  });

  it('fireSchedules refuses bad options with InvalidOptions', async () => {
    const { q } = await freshSchema();
    const r = await q.fireSchedules({ liveness: -5 });
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
  });
});

describe('worker requirements', () => {
  it('a worker without the capability does not claim the task, says so, and still fires schedules', async () => {
    const { schema } = await freshSchema();
    const schedules = { beat: { every: '1s', task: 'ping', grace: '1m' } } as const;
    const make = () => {
      const r = replica<Tasks>(url, { schema, tasks, schedules, requires: { publish: ['publish-token'] } });
      replicas.push(r);
      return r;
    };
    const laptop = make();
    const server = make();
    (await laptop.queue.enqueue(laptop.pool, 'publish', { post: 1 }))._unsafeUnwrap();
    const skippedSeen: unknown[] = [];
    const pinged: string[] = [];
    const published: string[] = [];
    const lw = laptop.queue.work(
      {
        ping: async () => void pinged.push('laptop'),
        publish: async () => void published.push('laptop'),
      },
      { listen, scheduleInterval: 20, hooks: { onTasksSkipped: (s) => skippedSeen.push(s) } },
    );
    expect(lw.skippedTasks).toEqual([{ task: 'publish', missing: ['publish-token'] }]);
    expect(skippedSeen).toEqual([[{ task: 'publish', missing: ['publish-token'] }]]);
    // The laptop's scheduler fires and it runs the ticks' pings, but never takes the publish job.
    await eventually(() => pinged.length >= 2, 10_000);
    const pending = await pool.query(`SELECT state FROM ${schema}.jobs WHERE task = 'publish'`);
    expect(pending.rows).toEqual([{ state: 'pending' }]);
    const sw = server.queue.work(
      { publish: async () => void published.push('server') },
      { listen, capabilities: ['publish-token'], schedules: false },
    );
    expect(sw.skippedTasks).toEqual([]);
    await eventually(() => published.length === 1);
    await Promise.all([lw.stop(), sw.stop()]);
    expect(published).toEqual(['server']);
  });

  it('a worker with no task it can claim still runs the scheduler when the queue declares schedules', async () => {
    const { schema } = await freshSchema();
    const r = replica<Tasks>(url, {
      schema,
      tasks,
      schedules: { beat: { every: '1s', task: 'publish', payload: { post: 7 }, grace: '1m' } },
      requires: { publish: ['publish-token'] },
    });
    replicas.push(r);
    const w = r.queue.work({ publish: async () => {} }, { listen, scheduleInterval: 20 });
    await eventually(async () => (await jobKeys(schema)).length >= 1, 10_000);
    await w.stop();
    expect(w.counters.started).toBe(0);
  });
});

describe('schedules: a cron that runs out of ticks', () => {
  it('a cron that never fires again (its last tick, by its year field, is in the past) is refused at definition', () => {
    let thrown: unknown;
    try {
      new Queue({
        pool,
        txManager: tm,
        tasks,
        schedules: { y2020: { cron: '0 0 0 1 1 * 2020', task: 'ping' } },
      });
    } catch (e) {
      thrown = e;
    }
    const e = thrown as { kind?: string; issues?: { path: unknown[]; message: string }[] };
    expect(e.kind).toBe('InvalidOptions');
    expect(e.issues?.map((i) => i.path)).toEqual([['schedules', 'y2020', 'cron']]);
    expect(e.issues?.[0]?.message).toMatch(/never fires again/);
  });

  it('a cron whose last tick passes ends alone: its tick fires, it is reported ended, and the other schedules fire', async () => {
    // One tick, two seconds from now on the server's clock (a seconds-and-year cron): valid when declared.
    const at = (
      await pool.query<{ t: Date }>("SELECT date_trunc('second', now()) + interval '2 seconds' AS t")
    ).rows[0]!.t;
    const cron = `${at.getUTCSeconds()} ${at.getUTCMinutes()} ${at.getUTCHours()} ${at.getUTCDate()} ${at.getUTCMonth() + 1} * ${at.getUTCFullYear()}`;
    const schedules = {
      last: { cron, task: 'ping' },
      hourly: { every: '1h', task: 'ping', missed: 'once' },
    } as const;
    const { schema } = await freshSchema();
    const [r] = replicasOf(1, schema, schedules);
    (await r!.queue.fireSchedules())._unsafeUnwrap();
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 0));
    // Past the cron's only tick on the server's clock (polled, not slept).
    await untilServerPasses(pool, at);
    const pass = (await r!.queue.fireSchedules())._unsafeUnwrap();
    expect(pass.fired.map((f) => [f.schedule, f.tick.toISOString()]).sort()).toEqual(
      [
        ['hourly', (await serverHour(pool, 0)).toISOString()],
        ['last', at.toISOString()],
      ].sort(),
    );
    expect(pass.ended).toEqual(['last']);
    expect(pass.failed).toEqual([]);
    const states = (await r!.queue.listSchedules())._unsafeUnwrap();
    expect(states.find((s) => s.name === 'last')).toMatchObject({
      enabled: false,
      nextRunAt: null,
      fired: 1,
    });
    // Later passes leave it alone and go on with the others.
    await setNextRun(pool, schema, 'hourly', await serverHour(pool, 0));
    const later = (await r!.queue.fireSchedules())._unsafeUnwrap();
    expect(later.fired.map((f) => f.schedule)).toEqual(['hourly']);
    expect(later.ended).toEqual([]);
    expect(later.redefined).toEqual([]);
  });
});

describe("schedules: a pass's own declarations are live", () => {
  it('liveness below 3 s is refused (fireSchedules and work): InvalidOptions, nothing sent', async () => {
    const { schema } = await freshSchema();
    const [r] = replicasOf(1, schema, { hourly: { every: '1h', task: 'ping' } });
    for (const liveness of [1, 100, '2999ms']) {
      const e = (await r!.queue.fireSchedules({ liveness }))._unsafeUnwrapErr();
      expect(e.kind).toBe('InvalidOptions');
      let thrown: unknown;
      try {
        r!.queue.work({ ping: () => {} }, { scheduleLiveness: liveness });
      } catch (error) {
        thrown = error;
      }
      expect((thrown as { kind?: string }).kind).toBe('InvalidOptions');
    }
    expect(
      (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.schedule_declarations`)).rows[0].n,
    ).toBe(0);
  });

  it("a declaring pass whose own declaration is older than liveness by the pass's clock does not disable its schedules", async () => {
    const { schema } = await freshSchema();
    const [r] = replicasOf(1, schema, {
      hourly: { every: '1h', task: 'ping' },
      other: { every: '1h', task: 'ping' },
    });
    (await r!.queue.fireSchedules())._unsafeUnwrap();
    // Another session holds the row of a schedule the pass must insert ('third', declared by nobody yet):
    // the pass waits on it after its declarations and its clock were taken.
    const blocker = await pool.connect();
    try {
      await pool.query(
        `INSERT INTO ${schema}.schedule_declarations (name, hash, definition) VALUES ('third', 'h3', '{}')`,
      );
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO ${schema}.schedules (name, hash, definition) VALUES ('third', '', '{}')`,
      );
      const passing = r!.queue.fireSchedules({ liveness: '1m' });
      await placeholderInsertWaits();
      // While it waits, its declarations age past liveness (what a slow pass, a stall or a clock step does).
      await pool.query(
        `UPDATE ${schema}.schedule_declarations SET last_declared_at = now() - interval '1 hour' WHERE name <> 'third'`,
      );
      await blocker.query('ROLLBACK');
      const pass = (await passing)._unsafeUnwrap();
      expect(pass.disabled).toEqual([]);
      const states = (await r!.queue.listSchedules())._unsafeUnwrap();
      expect(states.filter((s) => s.name !== 'third').map((s) => [s.name, s.enabled])).toEqual([
        ['hourly', true],
        ['other', true],
      ]);
    } finally {
      blocker.release();
    }
  });
});

describe('schedules: bounded work per pass after a long outage', () => {
  it('a per-second schedule down for three hours (an hour of grace): 1000 ticks per pass, every on-time tick once, in later passes', async () => {
    const { schema } = await freshSchema();
    const [r] = replicasOf(1, schema, { beat: { every: '1s', task: 'ping', grace: '1h' } });
    (await r!.queue.fireSchedules())._unsafeUnwrap();
    const start = (
      await pool.query<{ t: Date }>("SELECT date_trunc('second', now()) - interval '3 hours' AS t")
    ).rows[0]!.t;
    await setNextRun(pool, schema, 'beat', start);
    const sizes: number[] = [];
    let skipped = 0;
    for (;;) {
      const pass = (await r!.queue.fireSchedules({ declare: false }))._unsafeUnwrap();
      sizes.push(pass.fired.length);
      skipped += pass.skipped;
      if (pass.fired.length < 1000) break;
    }
    expect(sizes[0]).toBe(1000);
    expect(Math.max(...sizes)).toBe(1000);
    expect(sizes.length).toBeGreaterThanOrEqual(4);
    // About two hours skipped (older than the grace, by the clock of the first pass that got to them), nothing else.
    expect(skipped).toBeGreaterThanOrEqual(7190);
    expect(skipped).toBeLessThanOrEqual(7201);
    const ticks = (await jobKeys(schema))
      .map((k) => scheduledTick({ key: k })!.getTime())
      .sort((a, b) => a - b);
    expect(new Set(ticks).size).toBe(ticks.length);
    // One job per second, with no gap, from the first on-time tick to the last pass.
    expect(ticks.every((t, i) => i === 0 || t - ticks[i - 1]! === 1000)).toBe(true);
    // Every tick from the start is either skipped (the oldest) or fired (all after them): none lost.
    expect(ticks[0]).toBe(start.getTime() + skipped * 1000);
    expect(ticks.length).toBeGreaterThanOrEqual(3600);
    const [state] = (await r!.queue.listSchedules())._unsafeUnwrap();
    expect(state?.fired).toBe(ticks.length);
  });
});

describe('schedules: a redefinition racing a firing pass', () => {
  it('a declaring pass that redefines a schedule after another pass fired ticks later than its clock never fires those ticks again', async () => {
    const { schema } = await freshSchema();
    const v1 = { every: '1s', task: 'ping', grace: '1m', payload: { v: 1 } } as const;
    const v2 = { every: '1s', task: 'ping', grace: '1m', payload: { v: 2 } } as const;
    const [old] = replicasOf(1, schema, { beat: v1 });
    const [next] = replicasOf(1, schema, { beat: v2 });
    (await old!.queue.fireSchedules())._unsafeUnwrap();
    // The interleaving: the new deploy's declaring pass takes its clock, then waits on a row lock (another
    // session inserting a schedule it must insert too); meanwhile the old replica fires the ticks that come
    // after that clock; then the new pass goes on and redefines the schedule.
    await pool.query(
      `INSERT INTO ${schema}.schedule_declarations (name, hash, definition) VALUES ('third', 'h3', '{}')`,
    );
    const blocker = await pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO ${schema}.schedules (name, hash, definition) VALUES ('third', '', '{}')`,
      );
      const redefining = next!.queue.fireSchedules();
      await placeholderInsertWaits();
      const blockedAt = (await pool.query<{ t: Date }>('SELECT now() AS t')).rows[0]!.t;
      // A tick after the waiting pass's clock has come (polled on the server's clock, not slept).
      await untilServerPasses(pool, blockedAt, 1200);
      const firedByOld = (await old!.queue.fireSchedules({ declare: false }))._unsafeUnwrap().fired;
      const late = firedByOld.filter((f) => f.tick.getTime() > blockedAt.getTime());
      expect(late.length).toBeGreaterThan(0);
      // Those jobs ran and completed (deleted): a key no longer holds a tick back.
      await pool.query(`DELETE FROM ${schema}.jobs`);
      await blocker.query('ROLLBACK');
      const pass = (await redefining)._unsafeUnwrap();
      expect(pass.redefined).toEqual(['beat']);
      // The next passes fire the new definition's ticks: none of those the old replica fired.
      const later: Date[] = [];
      await eventually(async () => {
        later.push(
          ...(await old!.queue.fireSchedules({ declare: false }))._unsafeUnwrap().fired.map((f) => f.tick),
        );
        return later.length > 0;
      });
      const again = later.filter((t) => firedByOld.some((f) => f.tick.getTime() === t.getTime()));
      expect(again.map((t) => t.toISOString())).toEqual([]);
      expect(Math.min(...later.map((t) => t.getTime()))).toBeGreaterThan(
        Math.max(...firedByOld.map((f) => f.tick.getTime())),
      );
    } finally {
      blocker.release();
    }
  });
});

describe('schedules: a redefinition while ticks decided earlier still wait to fire', () => {
  it('the old definition fires every tick its pass decided to fire, then the new one takes over', async () => {
    const { schema } = await freshSchema();
    const v1 = { every: '1s', task: 'ping', grace: '1h', payload: { v: 1 } } as const;
    const v2 = { every: '1s', task: 'ping', grace: '1h', payload: { v: 2 } } as const;
    const [old] = replicasOf(1, schema, { beat: v1 });
    (await old!.queue.fireSchedules())._unsafeUnwrap();
    const start = (
      await pool.query<{ t: Date }>("SELECT date_trunc('second', now()) - interval '2 hours' AS t")
    ).rows[0]!.t;
    await setNextRun(pool, schema, 'beat', start);
    const first = (await old!.queue.fireSchedules({ declare: false }))._unsafeUnwrap();
    expect(first.fired).toHaveLength(1000); // about 2,600 more decided, waiting for the next passes
    // The new deploy starts: its declaring passes see the backlog of the old definition first.
    const [next] = replicasOf(1, schema, { beat: v2 });
    const redefinedAt: number[] = [];
    for (let pass = 0; pass < 10 && redefinedAt.length === 0; pass++) {
      const r = (await next!.queue.fireSchedules())._unsafeUnwrap();
      if (r.redefined.includes('beat')) redefinedAt.push(pass);
    }
    expect(redefinedAt.length).toBe(1);
    const jobs = await pool.query<{ key: string; v: number }>(
      `SELECT key, (payload->>'v')::int AS v FROM ${schema}.jobs ORDER BY run_at`,
    );
    const ticks = jobs.rows.map((j) => scheduledTick({ key: j.key })!.getTime());
    // Every on-time tick of the old definition fired once, without a gap, before the new one's first.
    expect(ticks.every((t, i) => i === 0 || t - ticks[i - 1]! === 1000)).toBe(true);
    expect(ticks.length).toBeGreaterThanOrEqual(3600);
    expect(jobs.rows.every((j) => j.v === 1)).toBe(true);
  });
});
