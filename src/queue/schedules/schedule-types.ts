import { z } from 'zod/v4';

// The schedules' shared types, in a file of their own: the options parse them, the tick arithmetic
// reads them and the pass fires them, and none of those needs to import another for a type.

/** What to do with ticks that passed while no replica was running (older than `grace`). */
export const missedPolicySchema = z.union([
  z.literal('skip'),
  z.literal('once'),
  z.strictObject({ catchUp: z.number().int().min(1).max(1000) }),
]);

/** What to do with missed ticks: 'skip' them, run 'once' for all of them, or catch up at most N. */
export type MissedPolicy = z.output<typeof missedPolicySchema>;

/** A schedule definition after validation: what is stored in the database and hashed. */
export interface StoredSchedule {
  /** The task each tick enqueues. */
  readonly task: string;
  /** The payload of each tick's job (validated by the task's schema). */
  readonly payload: unknown;
  /** The cron expression, or null for an interval. */
  readonly cron: string | null;
  /** The time zone the cron expression is read in. */
  readonly tz: string;
  /** The interval in ms, or null for a cron expression. */
  readonly every: number | null;
  /** What to do with ticks missed while no replica ran. */
  readonly missed: MissedPolicy;
  /** How late (ms) a tick may still be fired as on time. */
  readonly grace: number;
  /** The priority of each tick's job. */
  readonly priority: number;
  /** The attempts of each tick's job, or null for the queue's default. */
  readonly maxAttempts: number | null;
  /** The group of each tick's job (absent: none). */
  readonly group?: string;
}

/** A schedule this process declares: its name, its definition and the definition's hash. */
export interface DeclaredSchedule {
  /** The schedule's name (its key in `schedules`). */
  readonly name: string;
  /** sha-256 of the definition's canonical JSON: two deploys of the same definition agree. */
  readonly hash: string;
  /** The definition, normalized as it is stored. */
  readonly definition: StoredSchedule;
}
