import type { OtelAttributes } from './otel-api.js';

/** The connection settings a pool or client config exposes (all optional; a connection string is parsed). */
interface ConnectionConfig {
  readonly host?: unknown;
  readonly port?: unknown;
  readonly database?: unknown;
  readonly connectionString?: unknown;
}

/**
 * The OpenTelemetry database client attributes of a pool's server (semantic conventions):
 * `db.system.name` = postgresql, `db.namespace` (database), `server.address`, `server.port`.
 *
 * @example
 * const attributes = dbAttributes(pool.options);
 */
export function dbAttributes(config: ConnectionConfig | undefined): OtelAttributes {
  const attributes: OtelAttributes = { 'db.system.name': 'postgresql' };
  let { host, port, database } = config ?? {};
  if (typeof config?.connectionString === 'string') {
    try {
      const url = new URL(config.connectionString);
      host ??= url.hostname || undefined;
      port ??= url.port === '' ? undefined : Number(url.port);
      database ??= url.pathname.length > 1 ? decodeURIComponent(url.pathname.slice(1)) : undefined;
    } catch {
      // Not a URL (a key=value string): the attributes it would give are left out.
    }
  }
  if (typeof database === 'string') attributes['db.namespace'] = database;
  if (typeof host === 'string') attributes['server.address'] = host;
  const p = typeof port === 'string' ? Number(port) : port;
  if (typeof p === 'number' && Number.isInteger(p)) attributes['server.port'] = p;
  return attributes;
}
