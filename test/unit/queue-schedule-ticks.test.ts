import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  declareSchedules,
  type ScheduleDefinition,
  scheduleDefinitionSchema,
  scheduleHash,
  storedSchedule,
} from '../../src/queue/schedules/schedule-options.js';
import { scheduledTick } from '../../src/queue/schedules/schedule-state.js';
import { dueTicks, MAX_TICKS_FIRED, nextTick } from '../../src/queue/schedules/schedule-ticks.js';

const tasks = { report: z.object({ kind: z.string().default('daily') }), ping: z.object({}) };

function stored(d: ScheduleDefinition) {
  return storedSchedule(scheduleDefinitionSchema.parse(d), d.payload ?? {});
}

/** Every tick of `s` in [from, to). */
function ticks(d: ScheduleDefinition, from: string, to: string): string[] {
  const s = stored(d);
  const out: string[] = [];
  let t = nextTick(s, new Date(new Date(from).getTime() - 1));
  while (t !== undefined && t.getTime() < new Date(to).getTime()) {
    out.push(t.toISOString());
    t = nextTick(s, t);
  }
  return out;
}

const at = (iso: string) => new Date(iso);

describe('schedule ticks: cron in a time zone, across daylight-saving changes', () => {
  it('a 02:30 cron in Paris fires once on the spring-forward night (02:30 does not exist: 03:30 CEST)', () => {
    const got = ticks(
      { cron: '30 2 * * *', tz: 'Europe/Paris', task: 'ping' },
      '2026-03-28T00:00:00Z',
      '2026-03-31T00:00:00Z',
    );
    // 28th: 02:30 CET = 01:30Z; 29th: no 02:30, next existing time 03:30 CEST = 01:30Z; 30th: 02:30 CEST = 00:30Z
    expect(got).toEqual(['2026-03-28T01:30:00.000Z', '2026-03-29T01:30:00.000Z', '2026-03-30T00:30:00.000Z']);
  });

  it('a 02:30 cron in Paris fires once on the fall-back night (02:30 happens twice: the first one)', () => {
    const got = ticks(
      { cron: '30 2 * * *', tz: 'Europe/Paris', task: 'ping' },
      '2026-10-24T00:00:00Z',
      '2026-10-27T00:00:00Z',
    );
    expect(got).toEqual(['2026-10-24T00:30:00.000Z', '2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z']);
  });

  it('a daily 06:00 in New York stays at 06:00 local across the change (UTC instant moves by an hour)', () => {
    const got = ticks(
      { cron: '0 6 * * *', tz: 'America/New_York', task: 'ping' },
      '2026-03-07T00:00:00Z',
      '2026-03-10T00:00:00Z',
    );
    expect(got).toEqual(['2026-03-07T11:00:00.000Z', '2026-03-08T10:00:00.000Z', '2026-03-09T10:00:00.000Z']);
  });

  it('an hourly cron in Paris: 23 ticks on the spring-forward day, 24 on the fall-back day (each wall-clock hour once)', () => {
    const hourly = { cron: '0 * * * *', tz: 'Europe/Paris', task: 'ping' } as const;
    // Paris days in UTC: 29 March 2026 is 23 h long (23:00Z → 22:00Z), 25 October 25 h (22:00Z → 23:00Z).
    expect(ticks(hourly, '2026-03-28T23:00:00Z', '2026-03-29T22:00:00Z')).toHaveLength(23);
    expect(ticks(hourly, '2026-10-24T22:00:00Z', '2026-10-25T23:00:00Z')).toHaveLength(24);
  });

  it('an interval ticks at multiples of itself since the epoch (every replica computes the same instants)', () => {
    expect(ticks({ every: '15m', task: 'ping' }, '2026-01-01T00:07:00Z', '2026-01-01T01:00:00Z')).toEqual([
      '2026-01-01T00:15:00.000Z',
      '2026-01-01T00:30:00.000Z',
      '2026-01-01T00:45:00.000Z',
    ]);
  });
});

describe('dueTicks: the missed-tick policy', () => {
  const hourly = (missed: ScheduleDefinition['missed']) =>
    stored({ every: '1h', task: 'ping', missed, grace: '10m' });
  const from = at('2026-01-01T00:00:00Z');
  const now = at('2026-01-01T05:05:00Z'); // ticks 00:00 … 05:00 due; 05:00 on time (5 min late < 10 min grace)

  it("'skip' fires only the on-time tick", () => {
    const d = dueTicks(hourly('skip'), from, now);
    expect(d.fire.map((t) => t.toISOString())).toEqual(['2026-01-01T05:00:00.000Z']);
    expect(d.skipped).toBe(5);
    expect(d.next?.toISOString()).toBe('2026-01-01T06:00:00.000Z');
    expect(d.latest?.toISOString()).toBe('2026-01-01T05:00:00.000Z');
  });

  it("'once' fires one tick: the on-time one if any, else the latest missed", () => {
    expect(dueTicks(hourly('once'), from, now).fire.map((t) => t.toISOString())).toEqual([
      '2026-01-01T05:00:00.000Z',
    ]);
    const late = dueTicks(hourly('once'), from, at('2026-01-01T05:30:00Z'));
    expect(late.fire.map((t) => t.toISOString())).toEqual(['2026-01-01T05:00:00.000Z']);
    expect(late.skipped).toBe(5);
    expect(dueTicks(hourly('skip'), from, at('2026-01-01T05:30:00Z')).fire).toEqual([]);
  });

  it('{ catchUp: N } fires at most N missed ticks (the latest ones) plus the on-time one', () => {
    const d = dueTicks(hourly({ catchUp: 2 }), from, now);
    expect(d.fire.map((t) => t.toISOString())).toEqual([
      '2026-01-01T03:00:00.000Z',
      '2026-01-01T04:00:00.000Z',
      '2026-01-01T05:00:00.000Z',
    ]);
    expect(d.skipped).toBe(3);
  });

  it('a per-second schedule down for a month is handled in bounded work, nothing fired twice', () => {
    const s = stored({ every: '1s', task: 'ping', missed: { catchUp: 3 }, grace: 0 });
    const d = dueTicks(s, at('2026-01-01T00:00:00Z'), at('2026-02-01T00:00:00.500Z'));
    expect(d.fire.map((t) => t.toISOString())).toEqual([
      '2026-01-31T23:59:58.000Z',
      '2026-01-31T23:59:59.000Z',
      '2026-02-01T00:00:00.000Z',
    ]);
    expect(d.next?.toISOString()).toBe('2026-02-01T00:00:01.000Z');
    expect(d.skipped).toBeGreaterThan(2_000_000);
  });
});

describe('dueTicks: at most MAX_TICKS_FIRED per pass, the rest in the next passes', () => {
  // A per-second schedule with a day of grace, down for a day: 86,401 ticks on time.
  const s = stored({ every: '1s', task: 'ping', grace: '1d' });
  const from = at('2026-01-01T00:00:00Z');
  const downUntil = at('2026-01-02T00:00:00Z');

  /** Passes one after another (one second apart) until one fires fewer than the cap: caught up. */
  function drain(schedule: ReturnType<typeof stored>, start: Date, now0: Date) {
    const fired: number[] = [];
    const sizes: number[] = [];
    let next: Date | undefined = start;
    let lastTick: Date | undefined;
    let skipped = 0;
    let now = now0;
    while (next !== undefined && next.getTime() <= now.getTime()) {
      const d = dueTicks(schedule, next, now, { decidedUntil: lastTick });
      fired.push(...d.fire.map((t) => t.getTime()));
      sizes.push(d.fire.length);
      skipped += d.skipped;
      next = d.next;
      lastTick = d.latest ?? lastTick;
      now = new Date(now.getTime() + 1000);
      if (d.fire.length < MAX_TICKS_FIRED) break;
    }
    return { fired, sizes, skipped, now };
  }

  it('fires 1000 ticks in the first pass, then the rest, each exactly once, in order', () => {
    expect(MAX_TICKS_FIRED).toBe(1000);
    const first = dueTicks(s, from, downUntil);
    expect(first.fire).toHaveLength(1000);
    expect(first.next?.toISOString()).toBe('2026-01-01T00:16:40.000Z');
    expect(first.latest?.toISOString()).toBe('2026-01-02T00:00:00.000Z');
    const { fired, sizes, skipped } = drain(s, from, downUntil);
    expect(Math.max(...sizes)).toBe(1000);
    expect(skipped).toBe(0);
    // Every second from the start to the last pass's clock, once each, in order.
    expect(fired[0]).toBe(from.getTime());
    expect(fired.every((t, i) => i === 0 || t - (fired[i - 1] ?? 0) === 1000)).toBe(true);
    expect(fired.length).toBeGreaterThan(86_401);
  });

  it("ticks the policy keeps stay kept while they wait: 'skip' with an hour of grace after three hours down", () => {
    const hourGrace = stored({ every: '1s', task: 'ping', grace: '1h' });
    const now0 = at('2026-01-01T03:00:00Z');
    const { fired, sizes, skipped } = drain(hourGrace, from, now0);
    // The first pass skips what is older than an hour; the 3,601 on-time ticks (and those that come
    // meanwhile) fire over 4 passes, though by the last pass the first of them are more than an hour old.
    expect(skipped).toBe(7200);
    expect(sizes.slice(0, 3)).toEqual([1000, 1000, 1000]);
    expect(sizes).toHaveLength(4);
    expect(fired[0]).toBe(at('2026-01-01T02:00:00Z').getTime());
    expect(fired.at(-1)).toBe(at('2026-01-01T03:00:03Z').getTime());
    expect(fired.every((t, i) => i === 0 || t - (fired[i - 1] ?? 0) === 1000)).toBe(true);
  });

  it('the naive control: without the stored decision, the second pass skips what the first left', () => {
    const hourGrace = stored({ every: '1s', task: 'ping', grace: '1h' });
    const first = dueTicks(hourGrace, from, at('2026-01-01T03:00:00.500Z'));
    // A pass much later (a worker that passes rarely) without decidedUntil: the policy applies again.
    const second = dueTicks(hourGrace, first.next ?? from, at('2026-01-01T04:00:00.500Z'));
    expect(second.skipped).toBeGreaterThan(0);
    const kept = dueTicks(hourGrace, first.next ?? from, at('2026-01-01T04:00:00.500Z'), {
      decidedUntil: first.latest,
    });
    expect(kept.skipped).toBe(0);
    expect(kept.fire[0]?.getTime()).toBe(first.next?.getTime());
  });
});

describe('declareSchedules: validated up front', () => {
  it('accepts a cron with a time zone and an interval, and hashes equal definitions equally', () => {
    const a = declareSchedules(
      {
        nightly: { cron: '0 3 * * *', tz: 'Europe/Paris', task: 'report' },
        beat: { every: '30s', task: 'ping' },
      },
      tasks,
    )._unsafeUnwrap();
    expect(a.map((d) => d.name)).toEqual(['nightly', 'beat']);
    expect(a[0]?.definition.payload).toEqual({ kind: 'daily' }); // payload {} by default, the task's schema applied
    const b = declareSchedules({ nightly: { task: 'report', tz: 'Europe/Paris', cron: '0 3 * * *' } }, tasks);
    expect(b._unsafeUnwrap()[0]?.hash).toBe(a[0]?.hash);
    expect(scheduleHash({ ...a[0]!.definition, cron: '0 4 * * *' })).not.toBe(a[0]?.hash);
  });

  it('refuses bad expressions, zones, names, tasks and payloads with one InvalidOptions naming each', () => {
    const r = declareSchedules(
      {
        'bad:name': { every: '1m', task: 'ping' },
        minute61: { cron: '61 * * * *', task: 'ping' },
        mars: { cron: '0 * * * *', tz: 'Mars/Olympus', task: 'ping' },
        both: { cron: '0 * * * *', every: '1h', task: 'ping' },
        neither: { task: 'ping' },
        fast: { every: '10ms', task: 'ping' },
        ghost: { every: '1m', task: 'nope' },
        payload: { every: '1m', task: 'report', payload: { kind: 42 } },
        catchUp0: { every: '1m', task: 'ping', missed: { catchUp: 0 } },
        big: { every: '1m', task: 'ping', payload: { n: 1n } },
      },
      { ...tasks, ping: z.object({ n: z.unknown() }).partial() },
    );
    expect(r.isErr()).toBe(true);
    const e = r._unsafeUnwrapErr();
    expect(e.kind).toBe('InvalidOptions');
    const paths = new Set(e.issues.map((i) => i.path.slice(0, 3).join('.')));
    for (const p of [
      'schedules.bad:name',
      'schedules.minute61.cron',
      'schedules.mars.tz',
      'schedules.both.cron',
      'schedules.neither.cron',
      'schedules.fast.every',
      'schedules.ghost.task',
      'schedules.payload.payload',
      'schedules.catchUp0.missed',
      'schedules.big.payload',
    ]) {
      expect(
        [...paths].some((x) => x.startsWith(p)),
        p,
      ).toBe(true);
    }
  });
});

describe('scheduledTick', () => {
  it("reads the tick back from a scheduled job's key, and nothing from other keys", () => {
    expect(scheduledTick({ key: 'schedule:daily-post:2026-03-29T04:00:00.000Z' })?.toISOString()).toBe(
      '2026-03-29T04:00:00.000Z',
    );
    expect(scheduledTick({ key: 'receipt:42' })).toBeUndefined();
    expect(scheduledTick({ key: null })).toBeUndefined();
  });
});
