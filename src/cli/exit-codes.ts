/**
 * Exit codes of the `pg-txkit` command (documented in docs/cli.md).
 *
 * @example
 * process.exitCode = EXIT.usage;
 */
export const EXIT = {
  /** Everything fine: no findings (doctor), no pattern anomaly (demo), benchmarks ran (bench). */
  ok: 0,
  /** Findings: blocking/cascades/idle transactions (doctor), a pattern anomaly or a failed scenario (demo). */
  findings: 1,
  /** Bad arguments: unknown command or option, invalid value, invalid URL. */
  usage: 2,
  /** Cannot connect: server unreachable, authentication failed, database missing, server not started. */
  cannotConnect: 3,
  /** Something else failed (a query error, a benchmark that threw). */
  failure: 4,
  /** Interrupted by Ctrl-C (SIGINT), after a clean shutdown. */
  interrupted: 130,
} as const;

/** One of {@link EXIT}'s values. */
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];
