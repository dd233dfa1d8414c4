import type { z } from 'zod/v4';
import type { groupLimitsSchema, rateSchema } from './queue-options.js';

type GroupLimits = z.output<typeof groupLimitsSchema>;
type Rate = z.output<typeof rateSchema>;

/** The key of `groups` that applies to every group not named. */
export const DEFAULT_GROUP = 'default';

/**
 * A rate as the claim checks it: `perMs` is the window the claim counts its claims in, the declared
 * period plus the rate's guard (see RATE_GUARD_MS in queue-options.ts: handler starts, which follow
 * their claims by a varying delay, then also hold `limit` in any `per`). The guard travels with the
 * claim like the rest of the declaration, so the stored claim and its wait hint need no change.
 */
const rateJson = (r: Rate) => ({ limit: r.limit, perMs: r.per + r.guard });

/**
 * The limits a queue declares, as the jsonb its claim passes to `claim_jobs_limited` (migration 0001):
 * `{"default": L, "groups": {key: L}, "tasks": {task: {limit, perMs}}}`, L = `{concurrency?, rate?}`,
 * `perMs` a rate's period plus its guard.
 * undefined when the queue declares none: its workers use the plain claim.
 *
 * @example
 * limitsDeclaration({ default: { concurrency: 1 } }, undefined); // '{"default":{"concurrency":1},"groups":{},"tasks":{}}'
 */
export function limitsDeclaration(
  groups: Readonly<Record<string, GroupLimits>> | undefined,
  taskRates: Readonly<Record<string, Rate>> | undefined,
): string | undefined {
  const named = Object.entries(groups ?? {}).filter(([key]) => key !== DEFAULT_GROUP);
  const fallback = groups?.[DEFAULT_GROUP];
  const tasks = Object.entries(taskRates ?? {});
  if (named.length === 0 && fallback === undefined && tasks.length === 0) return undefined;
  const limits = (l: GroupLimits) => ({
    ...(l.concurrency === undefined ? {} : { concurrency: l.concurrency }),
    ...(l.rate === undefined ? {} : { rate: rateJson(l.rate) }),
  });
  return JSON.stringify({
    ...(fallback === undefined ? {} : { default: limits(fallback) }),
    groups: Object.fromEntries(named.map(([key, l]) => [key, limits(l)])),
    tasks: Object.fromEntries(tasks.map(([task, r]) => [task, rateJson(r)])),
  });
}

/**
 * Whether any limit declared is a rate (a group's `rate`, the default's, or a task rate). A settle that
 * takes a group's next jobs over (`completeAndTakeNext`) does not log claim times, so it is used only
 * when none is: with concurrency limits alone.
 *
 * @example
 * ratesDeclared({ default: { concurrency: 1 } }, undefined); // false
 */
export function ratesDeclared(
  groups: Readonly<Record<string, GroupLimits>> | undefined,
  taskRates: Readonly<Record<string, Rate>> | undefined,
): boolean {
  return (
    Object.keys(taskRates ?? {}).length > 0 || Object.values(groups ?? {}).some((l) => l.rate !== undefined)
  );
}
