import type { ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { type DatabaseFailure, ScheduleFailed } from '../../errors/errors.js';
import { asResult } from '../../patterns/run-query.js';
import { inClientTransaction } from '../in-client-transaction.js';
import { insertJobsValues } from '../store/insert-jobs.js';
import { parseStoredSchedule } from './schedule-options.js';
import type { ScheduleRow, ScheduleStatements } from './schedule-sql.js';
import { type DueTicks, dueTicks, nextTick } from './schedule-ticks.js';
import type { DeclaredSchedule, StoredSchedule } from './schedule-types.js';

/** What a schedule pass needs from its queue. */
export interface ScheduleContext {
  readonly pool: pg.Pool;
  readonly sql: ScheduleStatements;
  /** The one insert into jobs, as its schedule-ticks statement (see store/insert-jobs.ts). */
  readonly insertTicks: string;
  /**
   * Starts the producer span of a tick's jobs and gives its trace context (no-op without OpenTelemetry):
   * a scheduled job's run links to the pass that enqueued it, as an enqueued job's run links to its enqueue.
   */
  readonly send: (task: string, count: number) => TickSend | undefined;
  readonly declared: readonly DeclaredSchedule[];
  /** The queue's defaults for the jobs a tick enqueues. */
  readonly maxAttempts: number;
  readonly backoff: { readonly baseMs: number; readonly capMs: number };
}

/** A producer span of a tick's jobs: its trace context, ended with the ids inserted or the error. */
export interface TickSend {
  readonly carrier: Readonly<Record<string, string>> | null;
  end(outcome: { ids: readonly string[] } | { error: unknown }): void;
}

/** One tick fired by a pass. */
export interface ScheduleFiring {
  /** The schedule that fired. */
  readonly schedule: string;
  /** The task of the job it enqueued. */
  readonly task: string;
  /** The tick (the job's run_at, and in its key `schedule:<name>:<tick ISO>`). */
  readonly tick: Date;
  /** The job enqueued, or null when a live job already held the tick's key. */
  readonly jobId: string | null;
}

/** What one pass did. */
export interface SchedulePassResult {
  /** Ticks fired (their jobs are committed). */
  readonly fired: readonly ScheduleFiring[];
  /** Due ticks skipped by their missed-tick policy. */
  readonly skipped: number;
  /** Schedules whose definition changed (a newer deploy's, or a first declaration). */
  readonly redefined: readonly string[];
  /** Schedules disabled: no live replica declares them any more. */
  readonly disabled: readonly string[];
  /** Schedules whose stored definition this version cannot read (a newer version's feature): left alone. */
  readonly unreadable: readonly string[];
  /**
   * Schedules that ran out of ticks in this pass (a cron whose year field ends): their last ticks fired,
   * and they are stored disabled with no next run. A later deploy with another definition starts them again.
   */
  readonly ended: readonly string[];
  /**
   * Schedules this pass could not handle (their next tick could not be computed): each left as it was,
   * with the error; the pass fired the others and committed.
   */
  readonly failed: readonly ScheduleFailed[];
}

/** The key of a tick's job: `schedule:<name>:<tick ISO>`. */
export function tickKey(schedule: string, tick: Date): string {
  return `schedule:${schedule}:${tick.toISOString()}`;
}

/**
 * One pass of the scheduler. With `declare`: refreshes this process's declarations, then, in one
 * transaction, locks every schedule row no other pass holds, brings each to the definition in force (the
 * newest deploy some live replica declares; none: disabled) and fires its due ticks. Without: locks only
 * the due schedules and fires them. A tick's job is inserted in the same transaction that moves
 * `next_run_at` past it, under the row's lock: exactly once across replicas.
 */
export function runSchedulePass(
  ctx: ScheduleContext,
  options: { readonly declare: boolean; readonly liveness: number },
): ResultAsync<SchedulePassResult, DatabaseFailure> {
  const run = async (): Promise<SchedulePassResult> => {
    if (options.declare && ctx.declared.length > 0) {
      await ctx.pool.query(ctx.sql.declare, [
        ctx.declared.map((d) => d.name),
        ctx.declared.map((d) => d.hash),
        ctx.declared.map((d) => JSON.stringify(d.definition)),
      ]);
    }
    if (!options.declare) {
      const due = await ctx.pool.query<{ due: boolean }>(ctx.sql.anyDue);
      if (due.rows[0]?.due !== true)
        return { fired: [], skipped: 0, redefined: [], disabled: [], unreadable: [], ended: [], failed: [] };
    }
    return inClientTransaction(ctx.pool, (client) => pass(client, ctx, options));
  };
  return asResult(run());
}

async function pass(
  client: pg.PoolClient,
  ctx: ScheduleContext,
  options: { readonly declare: boolean; readonly liveness: number },
): Promise<SchedulePassResult> {
  const { sql } = ctx;
  // now() is the transaction's start: one clock (the server's) for every replica and every statement.
  const clock = await client.query<{ now: Date }>('SELECT now() AS now');
  const now = clock.rows[0]?.now ?? new Date();
  const redefined: string[] = [];
  const disabled: string[] = [];
  const unreadable: string[] = [];
  const ended: string[] = [];
  const failed: ScheduleFailed[] = [];
  let rows: ScheduleRow[];
  let winners = new Map<string, { hash: string; definition: unknown }>();
  if (options.declare) {
    const names = ctx.declared.map((d) => d.name);
    const hashes = ctx.declared.map((d) => d.hash);
    await client.query(sql.placeholders, [options.liveness, names, hashes]);
    rows = (await client.query<ScheduleRow>(sql.lockAll)).rows;
    const found = await client.query<{ name: string; hash: string; definition: unknown }>(sql.winners, [
      options.liveness,
      rows.map((r) => r.name),
      names,
      hashes,
    ]);
    winners = new Map(found.rows.map((w) => [w.name, w]));
  } else {
    rows = (await client.query<ScheduleRow>(sql.lockDue)).rows;
  }
  const fired: ScheduleFiring[] = [];
  let skipped = 0;
  for (const row of rows) {
    // First the ticks already due under the definition stored so far, then (when declaring) the switch
    // to the definition in force, from now on: a redefinition never fires a tick twice nor back-fills.
    const stored = parseStoredSchedule(row.definition);
    let backlogged = false;
    if (row.enabled && row.next_run_at !== null && row.next_run_at.getTime() <= now.getTime()) {
      if (stored === undefined) unreadable.push(row.name);
      else {
        // The tick arithmetic runs in JavaScript, before this schedule's statements: when it throws, this
        // schedule is left as it was and the others go on (it once rolled back the whole pass, for every
        // schedule of the queue, on every retry).
        // At most MAX_TICKS_FIRED ticks per schedule and pass; the stored last tick says which later
        // ticks an earlier pass decided to fire and left for this one.
        const from = row.next_run_at;
        const decidedUntil = row.last_tick ?? undefined;
        const due = ticksOf(row.name, () => dueTicks(stored, from, now, { decidedUntil }), failed);
        if (due === undefined) continue;
        fired.push(...(await fire(client, ctx, row.name, stored, due)));
        skipped += due.skipped;
        row.last_tick = due.latest ?? row.last_tick;
        if (due.next === undefined) ended.push(row.name);
        backlogged = due.next !== undefined && due.latest !== undefined && due.next <= due.latest;
      }
    }
    if (!options.declare) continue;
    const winner = winners.get(row.name);
    if (winner === undefined) {
      if (row.enabled) {
        await client.query(sql.disable, [row.name]);
        disabled.push(row.name);
      }
      continue;
    }
    if (winner.hash === row.hash && row.enabled) continue;
    // Ticks an earlier pass decided to fire still wait (more than a pass fires were due): the stored
    // definition fires them first, and the next definition takes over once they have fired.
    if (backlogged) continue;
    const definition = parseStoredSchedule(winner.definition);
    if (definition === undefined) {
      if (!unreadable.includes(row.name)) unreadable.push(row.name);
      continue;
    }
    // From the later of this pass's clock and the last tick handled: the row was read under its lock, and
    // another pass may have committed ticks later than this pass's now() (its transaction's start) while
    // this one waited (for a lock, a pool client); starting after now() fired those ticks again.
    const after = row.last_tick !== null && row.last_tick.getTime() > now.getTime() ? row.last_tick : now;
    const first = ticksOf(row.name, () => ({ next: nextTick(definition, after) }), failed);
    if (first === undefined) continue;
    // Ended already (disabled, no tick left) under this same definition: nothing to write or report.
    if (first.next === undefined && winner.hash === row.hash && row.next_run_at === null) continue;
    await client.query(sql.redefine, [row.name, winner.hash, JSON.stringify(definition), first.next ?? null]);
    redefined.push(row.name);
    if (first.next === undefined) ended.push(row.name);
  }
  return { fired, skipped, redefined, disabled, unreadable, ended, failed };
}

/**
 * Runs one schedule's tick arithmetic; when it throws, records a {@link ScheduleFailed} for that
 * schedule in `failed` and returns undefined (the caller skips it).
 */
function ticksOf<R>(name: string, compute: () => R, failed: ScheduleFailed[]): R | undefined {
  try {
    return compute();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    failed.push(new ScheduleFailed(name, `its next tick could not be computed: ${reason}`, error));
    return undefined;
  }
}

/** Inserts the jobs of `due.fire` and moves the schedule past every due tick (its row is locked). */
async function fire(
  client: pg.PoolClient,
  ctx: ScheduleContext,
  name: string,
  definition: StoredSchedule,
  due: DueTicks,
): Promise<ScheduleFiring[]> {
  const keys = due.fire.map((t) => tickKey(name, t));
  const send = ctx.send(definition.task, due.fire.length);
  const payload = JSON.stringify(definition.payload);
  let inserted: pg.QueryResult<{ id: string; key: string }>;
  try {
    inserted = await client.query<{ id: string; key: string }>(
      ctx.insertTicks,
      insertJobsValues({
        task: definition.task,
        payloads: due.fire.map(() => payload),
        priority: definition.priority,
        runAt: null,
        maxAttempts: definition.maxAttempts ?? ctx.maxAttempts,
        backoff: ctx.backoff,
        keys,
        groups: due.fire.map(() => definition.group ?? null),
        traceContext: send?.carrier ?? null,
        runAts: due.fire,
      }),
    );
  } catch (error) {
    send?.end({ error });
    throw error;
  }
  send?.end({ ids: inserted.rows.map((r) => String(r.id)) });
  const ids = new Map(inserted.rows.map((r) => [r.key, String(r.id)]));
  // next_run_at NULL when the schedule has no tick left: never due again (the due index skips it).
  await client.query(ctx.sql.advance, [
    name,
    due.next ?? null,
    due.latest ?? null,
    due.fire.length,
    due.skipped,
  ]);
  return due.fire.map((tick, i) => ({
    schedule: name,
    task: definition.task,
    tick,
    jobId: ids.get(keys[i] ?? '') ?? null,
  }));
}
