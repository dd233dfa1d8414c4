import { classify } from '../errors/index.js';

/**
 * A usage error: bad argument or option value (exit code 2).
 *
 * @example
 * throw new UsageError('unknown scenario id(s) x');
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * Cannot reach or log in to the server (exit code 3).
 *
 * @example
 * throw new ConnectError('cannot connect to postgres://u:***@h/d: ECONNREFUSED');
 */
export class ConnectError extends Error {
  override readonly name = 'ConnectError';
}

/**
 * Validates a connection string (postgres:// or postgresql://) and returns it; throws {@link UsageError}.
 *
 * @example
 * parseConnectionUrl('postgres://u:p@localhost:5432/app');
 */
export function parseConnectionUrl(value: string, what = '--url'): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`invalid ${what}: not a URL (expected postgres://user:password@host:port/database)`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new UsageError(
      `invalid ${what}: protocol must be postgres:// or postgresql://, not ${url.protocol}//`,
    );
  }
  if (!url.hostname && !url.searchParams.has('host')) throw new UsageError(`invalid ${what}: no host`);
  return value;
}

/**
 * The URL with its password replaced by `***` (for messages).
 *
 * @example
 * safeUrl('postgres://u:secret@h/d'); // → 'postgres://u:***@h/d'
 */
export function safeUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '<invalid url>';
  }
}

const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNRESET',
  '28P01', // invalid_password
  '28000', // invalid_authorization_specification
  '3D000', // invalid_catalog_name: the database does not exist
  '57P03', // cannot_connect_now (starting up / shutting down)
  '53300', // too_many_connections
]);

/**
 * Is this error a failure to connect (as opposed to a failing query)?
 *
 * @example
 * isConnectFailure(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' })); // → true
 */
export function isConnectFailure(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if (error instanceof ConnectError) return true;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && CONNECT_CODES.has(code)) return true;
  const message = (error as { message?: unknown }).message;
  if (
    typeof message === 'string' &&
    /timeout expired|Connection terminated due to connection timeout/i.test(message)
  ) {
    return true;
  }
  if (error instanceof AggregateError) return error.errors.some(isConnectFailure);
  return classify(error)?.kind === 'ConnectionLost';
}

/**
 * A one-line description of an error (no stack), with the SQLSTATE or socket code when there is one.
 *
 * @example
 * oneLine(Object.assign(new Error('a\n b'), { code: 'ECONNREFUSED' })); // → 'a b (ECONNREFUSED)'
 */
export function oneLine(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return oneLine(error.errors[0]);
  const e = error as { message?: unknown; code?: unknown } | null;
  const message = typeof e?.message === 'string' && e.message ? e.message : String(error);
  const code = typeof e?.code === 'string' && !message.includes(e.code) ? ` (${e.code})` : '';
  return `${message}${code}`.replace(/\s+/g, ' ').trim();
}
