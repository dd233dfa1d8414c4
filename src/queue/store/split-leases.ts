import { InvalidOptions } from '../../errors/errors.js';
import type { JobLease } from '../job.js';

/** The largest job id: ids are `bigint` identity values. */
const MAX_JOB_ID = '9223372036854775807';
const DIGITS = /^\d{1,19}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether `id` can be a job id: a decimal bigint in range. One beyond bigint reached the server and
 * failed the statement with a raw 22003.
 *
 * @example
 * isJobId('42'); // true
 * isJobId('9223372036854775808'); // false
 */
export function isJobId(id: unknown): boolean {
  const text = typeof id === 'string' ? id : String(id);
  if (!DIGITS.test(text)) return false;
  // Fewer than 19 digits always fit; 19 digits compare as text (same length), leading zeros aside.
  const digits = text.length > 1 ? text.replace(/^0+(?=\d)/, '') : text;
  return digits.length < 19 || (digits.length === 19 && digits <= MAX_JOB_ID);
}

/** A lease with an id or token the server would refuse, and why. */
export interface InvalidLease {
  readonly id: string;
  readonly error: InvalidOptions;
}

/** Why a lease is malformed, or undefined when it is well-formed. */
function leaseProblem(lease: JobLease): InvalidOptions | undefined {
  if (!isJobId(lease.id)) return new InvalidOptions([{ path: ['id'], message: 'not a job id (a bigint)' }]);
  if (typeof lease.leaseToken !== 'string' || !UUID.test(lease.leaseToken))
    return new InvalidOptions([{ path: ['leaseToken'], message: 'not a lease token (a uuid)' }]);
  return undefined;
}

/**
 * Splits the leases of a batch settle into well-formed ones (sent in one statement) and malformed ones
 * (each with its own InvalidOptions, sent nowhere). One malformed token cast to uuid[] failed the whole
 * batch with 22P02, so the other jobs were not settled either.
 *
 * @example
 * const { valid, invalid } = splitLeases(jobs);
 */
export function splitLeases<L>(
  items: readonly L[],
  leaseOf: (item: L) => JobLease,
): { valid: L[]; invalid: InvalidLease[] } {
  const valid: L[] = [];
  const invalid: InvalidLease[] = [];
  for (const item of items) {
    const lease = leaseOf(item);
    const problem = leaseProblem(lease);
    if (problem === undefined) valid.push(item);
    else invalid.push({ id: String(lease.id), error: problem });
  }
  return { valid, invalid };
}

/** The lease's own problem as an InvalidOptions, or undefined when it is well-formed (single settles). */
export function invalidLease(lease: JobLease): InvalidOptions | undefined {
  return leaseProblem(lease);
}

/**
 * The ids and lease tokens of well-formed leases (from {@link splitLeases}) as two array literals for
 * `$1::bigint[]` and `$2::uuid[]`. Digits and uuids need no quoting, so the literal is a join: the
 * driver's own array serialisation escaped every element one by one, a visible cost of a 500-job settle.
 *
 * @example
 * const [ids, tokens] = leaseArrays(valid); // '{1,2}', '{3f1c…,9a0b…}'
 */
export function leaseArrays(valid: readonly JobLease[]): [string, string] {
  // Joined from two arrays: a string built with += is a chain of one piece per job to flatten.
  const ids = new Array<string>(valid.length);
  const tokens = new Array<string>(valid.length);
  for (let i = 0; i < valid.length; i++) {
    const lease = valid[i] as JobLease;
    ids[i] = String(lease.id);
    tokens[i] = lease.leaseToken;
  }
  return [`{${ids.join(',')}}`, `{${tokens.join(',')}}`];
}
