import type { Result } from 'neverthrow';
import { dbAttributes } from './db-attributes.js';
import { inSpan } from './in-span.js';
import type { OpenTelemetryApi, OtelAttributes } from './otel-api.js';
import { SpanKind } from './span-kind.js';

/** What a lock wait's span says about it. */
export interface LockWaitInfo {
  /** 'transaction' (pg_advisory_xact_lock) or 'session' (pg_advisory_lock on a dedicated connection). */
  readonly scope: 'transaction' | 'session';
  /** 'block' or 'try'. */
  readonly wait: 'block' | 'try';
  /** The keys, as `formatAdvisoryKey` prints them. */
  readonly keys: readonly string[];
  /** The connection settings (for the database attributes). */
  readonly connection?: object | undefined;
}

/**
 * Runs a lock acquisition in a CLIENT span `advisory lock` (`db.system.name` = postgresql,
 * `db.operation.name` = the function called, `pg_txkit.lock.keys`, `pg_txkit.lock.wait`, and the outcome:
 * `acquired`, or the error kind: `LockBusy`, `LockNotAvailable` …). Without OpenTelemetry it only
 * calls `acquire`.
 *
 * @example
 * const locked = await traceLockWait(tm.telemetry, { scope: 'transaction', wait: 'block', keys: ['42'] }, () => take());
 */
export async function traceLockWait<T, E>(
  api: OpenTelemetryApi | undefined,
  info: LockWaitInfo,
  acquire: () => Promise<Result<T, E>>,
): Promise<Result<T, E>> {
  if (api === undefined) return acquire();
  const fn = info.scope === 'transaction' ? 'pg_advisory_xact_lock' : 'pg_advisory_lock';
  const attributes: OtelAttributes = {
    ...dbAttributes(info.connection),
    'db.operation.name': info.wait === 'try' ? fn.replace('pg_', 'pg_try_') : fn,
    'pg_txkit.lock.scope': info.scope,
    'pg_txkit.lock.wait': info.wait,
    'pg_txkit.lock.keys': info.keys.join(','),
  };
  return inSpan(api, 'advisory lock', SpanKind.CLIENT, attributes, acquire, (result, span) => {
    span.setAttribute('pg_txkit.lock.outcome', result.isOk() ? 'acquired' : 'not acquired');
    return result.isErr() ? result.error : undefined;
  });
}
