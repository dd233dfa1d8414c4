import { Cron } from 'croner';
import type { StoredSchedule } from './schedule-types.js';

/**
 * Ticks of one schedule fired by one pass at most: the jobs of a pass are inserted in its transaction, and
 * after a day down a per-second schedule with a day of grace inserted 86,401 jobs in one transaction
 * (2.1 million after 24 days). The ticks beyond it that the pass decided to fire fire in the next passes
 * (a worker passes every second), oldest first, whatever their age by then: nothing the missed-tick
 * policy keeps is lost.
 */
export const MAX_TICKS_FIRED = 1000;

/** Ticks looked at in one pass at most: beyond that (a per-second cron down for days) the rest is skipped. */
const MAX_TICKS_SCANNED = 100_000;

/**
 * The first tick of `s` strictly after `after`, or undefined when there is none: a cron whose year field
 * ends ('0 0 6 * * * 2027') runs out of ticks after its last one. A cron is evaluated in its time zone by croner: a
 * wall-clock time that does not exist that day (spring forward) comes at the next existing time, one that
 * happens twice (fall back) once, the first time. An interval ticks at the multiples of `every` since the
 * epoch, so every replica and every version computes the same instants.
 *
 * @example
 * nextTick({ ...daily, cron: '30 2 * * *', tz: 'Europe/Paris' }, new Date('2026-03-28T12:00:00Z'));
 * // 2026-03-29T01:30:00Z: 03:30 CEST, 02:30 does not exist that night
 */
export function nextTick(s: StoredSchedule, after: Date): Date | undefined {
  if (s.every !== null) return new Date((Math.floor(after.getTime() / s.every) + 1) * s.every);
  // croner accepts a 7th (year) field: such a cron has a last tick. (It threw here, inside the pass
  // transaction, which then rolled back for every schedule of the queue, on every retry.)
  return new Cron(s.cron ?? '', { timezone: s.tz, paused: true }).nextRun(after) ?? undefined;
}

/** The ticks one pass fires, the count it skips, and the schedule's next run. */
export interface DueTicks {
  /** Ticks to enqueue now, oldest first. */
  readonly fire: readonly Date[];
  /** Due ticks not enqueued (missed, by the policy). */
  readonly skipped: number;
  /** The first tick after `now`: the schedule's new `next_run_at`; undefined when it has no tick left. */
  readonly next: Date | undefined;
  /** The latest due tick (fired or skipped), or undefined when none was due. */
  readonly latest: Date | undefined;
}

/**
 * Which ticks in [`from`, `now`] to fire, at most `max` ({@link MAX_TICKS_FIRED}). A tick no older than
 * `grace` is on time and always fires; older ones were missed (no replica was up) and follow the policy:
 * 'skip' none, 'once' the latest of them when no on-time tick fires anyway, `{ catchUp: N }` the latest N.
 * When more than `max` are to fire, the oldest `max` fire now, `next` is the first of the others and
 * `latest` the latest tick decided: the next pass gets it back as `decidedUntil` (the schedule's stored
 * last tick, then not before its next run) and fires the ticks up to it first, whatever their age by then.
 *
 * @example
 * dueTicks(hourly, new Date('2026-01-01T00:00:00Z'), new Date('2026-01-01T05:00:10Z'));
 * // 'skip': fire [05:00] (on time), skipped 5
 */
export function dueTicks(
  s: StoredSchedule,
  from: Date,
  now: Date,
  options: { readonly decidedUntil?: Date | undefined; readonly max?: number } = {},
): DueTicks {
  const max = options.max ?? MAX_TICKS_FIRED;
  const decided = options.decidedUntil;
  // The ticks an earlier pass decided to fire and left for later (there were more than `max`).
  const backlog: Date[] = [];
  let tick: Date | undefined = from;
  while (decided !== undefined && tick !== undefined && tick.getTime() <= decided.getTime()) {
    if (backlog.length === max) return { fire: backlog, skipped: 0, next: tick, latest: decided };
    backlog.push(tick);
    tick = nextTick(s, tick);
  }
  if (tick === undefined) return { fire: backlog, skipped: 0, next: undefined, latest: decided };
  const due = byPolicy(s, tick, now);
  const fire = backlog.length === 0 ? due.fire : [...backlog, ...due.fire];
  const latest = due.latest ?? decided;
  if (fire.length <= max) return { fire, skipped: due.skipped, next: due.next, latest };
  return { fire: fire.slice(0, max), skipped: due.skipped, next: fire[max], latest };
}

/** The ticks in [`from`, `now`] the missed-tick policy fires (all of them), see {@link dueTicks}. */
function byPolicy(s: StoredSchedule, from: Date, now: Date): DueTicks {
  const onTimeFrom = now.getTime() - s.grace;
  const keepMissed = s.missed === 'skip' ? 0 : s.missed === 'once' ? 1 : s.missed.catchUp;
  const missed: Date[] = [];
  const onTime: Date[] = [];
  let skipped = 0;
  let tick: Date | undefined = from;
  let scanned = 0;
  let latest: Date | undefined;
  while (tick !== undefined && tick.getTime() <= now.getTime()) {
    if (++scanned > MAX_TICKS_SCANNED) {
      // Too many to look at one by one (a per-second schedule down for days): jump to just before the
      // ticks that can still fire (the on-time window and the N missed ones kept), counting the rest.
      scanned = 0;
      const step = Math.max(1, (nextTick(s, tick)?.getTime() ?? tick.getTime()) - tick.getTime());
      const resume = nextTick(s, new Date(onTimeFrom - (keepMissed + 1) * step - 1));
      if (resume !== undefined && resume.getTime() > tick.getTime()) {
        skipped += missed.length + estimateTicks(s, tick, resume);
        missed.length = 0;
        tick = resume;
        if (tick.getTime() > now.getTime()) break;
      }
    }
    latest = tick;
    if (tick.getTime() >= onTimeFrom) onTime.push(tick);
    else {
      missed.push(tick);
      if (missed.length > keepMissed) {
        missed.shift();
        skipped++;
      }
    }
    tick = nextTick(s, tick);
  }
  let fire: Date[];
  if (s.missed === 'once' && onTime.length > 0) {
    skipped += missed.length;
    fire = onTime;
  } else fire = [...missed, ...onTime];
  return { fire, skipped, next: tick, latest };
}

/** Roughly how many ticks lie in [from, to) (only for the count of ticks skipped in bulk). */
function estimateTicks(s: StoredSchedule, from: Date, to: Date): number {
  const span = to.getTime() - from.getTime();
  if (s.every !== null) return Math.max(0, Math.floor(span / s.every));
  const step = (nextTick(s, from)?.getTime() ?? from.getTime()) - from.getTime();
  return step > 0 ? Math.max(0, Math.floor(span / step)) : 0;
}
