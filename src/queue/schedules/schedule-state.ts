import type { ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { z } from 'zod/v4';
import type { DatabaseFailure } from '../../errors/errors.js';
import { livenessSchema } from '../queue-options.js';
import { runStatement } from '../store/run-statement.js';
import { parseStoredSchedule } from './schedule-options.js';
import type { ScheduleRow, ScheduleStatements } from './schedule-sql.js';
import type { StoredSchedule } from './schedule-types.js';

/** Options of `queue.fireSchedules()`. */
export const fireSchedulesOptionsSchema = z.strictObject({
  /** Record this process's definitions as live and reconcile the stored ones first (default true). */
  declare: z.boolean().default(true),
  /** A declaration not refreshed for this long is no longer live (default 1 minute, at least 3 s). */
  liveness: livenessSchema.default(60_000),
});

/** Options of `queue.fireSchedules()`. */
export type FireSchedulesOptions = z.input<typeof fireSchedulesOptionsSchema>;

/** A stored schedule, as `queue.listSchedules()` reports it. */
export interface ScheduleState {
  /** The schedule's name. */
  readonly name: string;
  /** The definition in force (undefined when this version cannot read it, or before the first reconcile). */
  readonly definition: StoredSchedule | undefined;
  /** The hash of the definition in force. */
  readonly hash: string;
  /** False once no live replica declares it. */
  readonly enabled: boolean;
  /** The next tick to fire (persisted; null when disabled). */
  readonly nextRunAt: Date | null;
  /**
   * The latest tick handled (fired or skipped). While more ticks are due than a pass fires (1000), the
   * latest tick decided: those from `nextRunAt` up to it fire in the next passes.
   */
  readonly lastTick: Date | null;
  /** Ticks fired so far. */
  readonly fired: number;
  /** Ticks skipped by the missed-tick policy so far. */
  readonly skipped: number;
}

/** Reads every stored schedule (a plain read). */
export function scheduleStates(
  pool: pg.Pool,
  sql: ScheduleStatements,
): ResultAsync<ScheduleState[], DatabaseFailure> {
  type Row = ScheduleRow & { fired: number; skipped: number };
  return runStatement<Row>(pool, sql.list, []).map((r) =>
    r.rows.map((row) => ({
      name: row.name,
      definition: parseStoredSchedule(row.definition),
      hash: row.hash,
      enabled: row.enabled,
      nextRunAt: row.next_run_at,
      lastTick: row.last_tick,
      fired: row.fired,
      skipped: row.skipped,
    })),
  );
}

/**
 * The tick a scheduled job was enqueued for (from its key `schedule:<name>:<tick ISO>`), or undefined
 * for a job no schedule enqueued. Stable across retries (the job's runAt moves with its backoff).
 *
 * @example
 * const worker = queue.work({ 'generate-post': async (job) => {
 *   const day = scheduledTick(job)?.toISOString().slice(0, 10);
 * } });
 */
export function scheduledTick(job: { readonly key: string | null }): Date | undefined {
  const m = /^schedule:[A-Za-z0-9_.-]+:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)$/.exec(job.key ?? '');
  if (m?.[1] === undefined) return undefined;
  const tick = new Date(m[1]);
  return Number.isNaN(tick.getTime()) ? undefined : tick;
}
