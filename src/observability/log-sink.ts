import type { Logger, LogLevel } from './logger.js';
import { RateLimitedConsole } from './rate-limited-console.js';

/** One error's own text: its message, else its code (an AggregateError of a refused connect has none). */
function ownText(error: unknown): string {
  if (typeof error !== 'object' || error === null) return String(error);
  const { message, code } = error as { message?: unknown; code?: unknown };
  if (typeof message === 'string' && message !== '') return message;
  if (typeof code === 'string') return code;
  return String(error);
}

/** The text of a thrown value and of its causes (a ConnectionLost says why through its driver cause). */
export function errorChainText(error: unknown): string {
  const parts: string[] = [];
  let at: unknown = error;
  for (let depth = 0; depth < 4 && at !== undefined && at !== null; depth++) {
    const text = ownText(at);
    if (!parts.includes(text)) parts.push(text);
    at = typeof at === 'object' ? (at as { cause?: unknown }).cause : undefined;
  }
  return parts.join(': ');
}

/**
 * Where a component's log lines go: the user's {@link Logger} (a logger that throws is ignored: logging
 * never breaks the work), or without one the rate-limited console for `error` and `warn` (info and
 * debug are dropped). `key` names the kind of event for the console's rate limit.
 *
 * @example
 * const log = new LogSink(options.logger, 'pg-txkit queue worker');
 * log.error('claim', { err: e, phase: 'claim' }, 'claim failed');
 */
export class LogSink {
  readonly #logger: Logger | undefined;
  readonly #console: RateLimitedConsole | undefined;
  readonly #prefix: string;

  constructor(logger: Logger | undefined, prefix: string, fallback?: RateLimitedConsole) {
    this.#logger = logger;
    this.#prefix = prefix;
    this.#console = logger === undefined ? (fallback ?? new RateLimitedConsole()) : undefined;
  }

  /** Whether a user logger receives the lines (else the console fallback). */
  get hasLogger(): boolean {
    return this.#logger !== undefined;
  }

  error(key: string, obj: Record<string, unknown>, msg: string): void {
    this.#write('error', key, obj, msg);
  }
  warn(key: string, obj: Record<string, unknown>, msg: string): void {
    this.#write('warn', key, obj, msg);
  }
  info(key: string, obj: Record<string, unknown>, msg: string): void {
    this.#write('info', key, obj, msg);
  }
  debug(key: string, obj: Record<string, unknown>, msg: string): void {
    this.#write('debug', key, obj, msg);
  }

  #write(level: LogLevel, key: string, obj: Record<string, unknown>, msg: string): void {
    const text = `${this.#prefix}: ${msg}`;
    if (this.#logger !== undefined) {
      try {
        this.#logger[level](obj, text);
      } catch {
        // A logger that throws must not break the worker, the lock or the transaction.
      }
      return;
    }
    if (level !== 'error' && level !== 'warn') return;
    const err = obj.err;
    this.#console?.line(key, err === undefined ? text : `${text} (${errorChainText(err)})`);
  }
}
