import { z } from 'zod/v4';

/**
 * A pino-compatible logger: level methods taking an object of fields and a message. pino, bunyan-style
 * child loggers and most structured loggers fit as they are; so does a plain object of four functions.
 *
 * What pg-txkit logs: `error` for what stops work (a claim, settle or LISTEN connection failing, a
 * pool's idle connection failing, a hook or callback that threw), `warn` for what a user must look at
 * (a handler past its timeout, a lost session lock, a slow transaction), `info` for recoveries and
 * migrations applied, `debug` for retries and repeated failures of a streak already reported.
 *
 * @example
 * import pino from 'pino';
 * const logger = pino();
 * const tm = new TxManager(pool, { logger });
 * const queue = new Queue({ pool, txManager: tm, tasks, logger });
 */
export interface Logger {
  /** Something failed and needs a person (a database unreachable, a settle not written). */
  error(obj: object, msg?: string): void;
  /** Something went wrong and was handled (a handler past its timeout, a lost session lock). */
  warn(obj: object, msg?: string): void;
  /** A notable event (a worker's database reachable again). */
  info(obj: object, msg?: string): void;
  /** Detail for debugging. */
  debug(obj: object, msg?: string): void;
}

/** The log levels pg-txkit uses. */
export type LogLevel = keyof Logger;

const LEVELS: readonly LogLevel[] = ['error', 'warn', 'info', 'debug'];

/**
 * Whether `value` has the four level methods of a {@link Logger} (a structural check).
 *
 * @example
 * if (!isLogger(options.logger)) throw new TypeError('not a logger');
 */
export function isLogger(value: unknown): value is Logger {
  if (typeof value !== 'object' || value === null) return false;
  const record = value as Record<string, unknown>;
  return LEVELS.every((level) => typeof record[level] === 'function');
}

/** The `logger` option's schema (the same in every options object that takes one). */
export const loggerSchema = z.custom<Logger>(isLogger, 'a logger with error, warn, info and debug methods');
