import { createHash } from 'node:crypto';
import { err, ok, type Result } from 'neverthrow';
import type { InvalidOptions } from '../errors/index.js';
import { invalid } from './parse-options.js';

/**
 * A 64-bit advisory lock key (`pg_advisory_xact_lock(bigint)`): a signed bigint in
 * [-2^63, 2^63 - 1]. Make one with {@link advisoryKey}.
 */
export type AdvisoryKey = bigint;

/**
 * The two-int32 form of an advisory key (`pg_advisory_xact_lock(int, int)`): an explicit numeric
 * namespace and an id. PostgreSQL keeps this form in a separate key space: the pair (1, 2) never
 * conflicts with any bigint key. Make one with {@link advisoryKeyPair}.
 */
export interface AdvisoryKeyPair {
  /** Namespace number, a signed 32-bit integer. */
  readonly namespace: number;
  /** Id inside the namespace, a signed 32-bit integer. */
  readonly id: number;
}

/** Any advisory key the module accepts. */
export type AnyAdvisoryKey = AdvisoryKey | AdvisoryKeyPair;

const INT32_MIN = -2_147_483_648;
const INT32_MAX = 2_147_483_647;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * A stable 64-bit advisory key for `(namespace, id)`: the first 8 bytes of
 * `sha256("<namespace>:<id>")` read as a signed big-endian integer — a plain `bigint`, usable inline
 * as a query parameter or a module-level constant.
 *
 * The same input gives the same key in every process, machine, Node version and pg-txkit version
 * (it is part of the public contract). It never uses `hashtext()` (whose result PostgreSQL does not
 * promise to keep across major versions) nor a process-dependent hash. Collisions between different
 * inputs have probability ~n²/2^65 — negligible, and a collision only serializes two unrelated
 * critical sections, it never breaks one.
 *
 * Rules: `namespace` is a non-empty string without `:` (so `("a:b", "c")` and `("a", "b:c")` can never
 * collide); `id` is a non-empty string, a safe integer or a bigint. A violation throws
 * `InvalidOptions`: a wrong key is a defect in the calling code, not an outcome to handle. Include the
 * tenant in the id when the work is per tenant, so independent tenants do not block each other.
 *
 * @example
 * const key = advisoryKey('invoice-close', `${tenantId}:${period}`);
 * await withAdvisoryLock(tm, key, (tx) => closePeriod(tx));
 * await pool.query('SELECT pg_advisory_xact_lock($1)', [advisoryKey('daily-post', day)]);
 */
export function advisoryKey(namespace: string, id: string | number | bigint): AdvisoryKey {
  if (typeof namespace !== 'string' || namespace.length === 0) {
    throw invalid(['namespace'], 'namespace must be a non-empty string');
  }
  if (namespace.includes(':')) {
    throw invalid(['namespace'], 'namespace must not contain ":" (it separates namespace and id)');
  }
  let idText: string;
  if (typeof id === 'string') {
    if (id.length === 0) throw invalid(['id'], 'id must be a non-empty string');
    idText = id;
  } else if (typeof id === 'number') {
    if (!Number.isSafeInteger(id)) throw invalid(['id'], `id must be a safe integer, got ${id}`);
    idText = String(id);
  } else if (typeof id === 'bigint') {
    idText = id.toString();
  } else {
    throw invalid(['id'], 'id must be a string, a safe integer or a bigint');
  }
  const digest = createHash('sha256').update(`${namespace}:${idText}`, 'utf8').digest();
  return digest.readBigInt64BE(0);
}

/**
 * The two-int32 form `(namespace, id)` of numbered namespaces
 * (`pg_try_advisory_xact_lock(30, tenantId)`), with range checks: both must be integers in
 * [-2^31, 2^31 - 1], else `InvalidOptions`. Interoperates with SQL written by hand that uses the
 * two-argument lock functions.
 *
 * @example
 * const NS = { reportGeneration: 30 } as const;
 * const key = advisoryKeyPair(NS.reportGeneration, tenantNumericId);
 */
export function advisoryKeyPair(namespace: number, id: number): Result<AdvisoryKeyPair, InvalidOptions> {
  const issues: { path: string; value: unknown }[] = [];
  if (!isInt32(namespace)) issues.push({ path: 'namespace', value: namespace });
  if (!isInt32(id)) issues.push({ path: 'id', value: id });
  const first = issues[0];
  if (first) {
    return err(
      invalid(
        [first.path],
        `must be an integer in [${INT32_MIN}, ${INT32_MAX}], got ${describe(first.value)}`,
      ),
    );
  }
  return ok(Object.freeze({ namespace, id }));
}

/**
 * A short description of a rejected value that never throws: `String()` throws a TypeError on a
 * null-prototype object or a symbol-keyed `toPrimitive` (found by test/property/fuzz-advisory).
 */
function describe(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  return value === null ? 'null' : typeof value;
}

function isInt32(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= INT32_MIN && value <= INT32_MAX;
}

/** Is `value` a valid key (a bigint in the signed 64-bit range, or a valid int32 pair)? */
export function isAdvisoryKey(value: unknown): value is AnyAdvisoryKey {
  if (typeof value === 'bigint') return value >= INT64_MIN && value <= INT64_MAX;
  if (typeof value !== 'object' || value === null) return false;
  const pair = value as Partial<AdvisoryKeyPair>;
  return isInt32(pair.namespace) && isInt32(pair.id);
}

/** Decimal text of a key, for messages and `LockBusy.keys` (`"123"` or `"30/42"` for a pair). */
export function formatAdvisoryKey(key: AnyAdvisoryKey): string {
  return typeof key === 'bigint' ? key.toString() : `${key.namespace}/${key.id}`;
}

/**
 * The key as `pg_locks` shows it: a bigint key `k` appears as `classid = k >> 32` (unsigned),
 * `objid = k & 0xffffffff`, `objsubid = 1`; a pair as `classid = namespace`, `objid = id` (both as
 * unsigned 32-bit oids), `objsubid = 2`.
 *
 * @example
 * lockTagOf(-1n); // { classid: 4294967295, objid: 4294967295, objsubid: 1 }
 */
export function lockTagOf(key: AnyAdvisoryKey): { classid: number; objid: number; objsubid: 1 | 2 } {
  if (typeof key === 'bigint') {
    const unsigned = BigInt.asUintN(64, key);
    return { classid: Number(unsigned >> 32n), objid: Number(unsigned & 0xffff_ffffn), objsubid: 1 };
  }
  return { classid: key.namespace >>> 0, objid: key.id >>> 0, objsubid: 2 };
}

/**
 * The key a `pg_locks` row describes (inverse of `lockTagOf`): a bigint for `objsubid = 1`,
 * a pair for `objsubid = 2`.
 *
 * @example
 * keyFromLockTag(4294967295, 4294967295, 1); // -1n
 */
export function keyFromLockTag(classid: number, objid: number, objsubid: number): AnyAdvisoryKey {
  if (objsubid === 2) return Object.freeze({ namespace: classid | 0, id: objid | 0 });
  return BigInt.asIntN(64, (BigInt(classid >>> 0) << 32n) | BigInt(objid >>> 0));
}

/** Total order on keys used for acquisition: bigint keys (ascending) before pairs (by namespace, id). */
export function compareAdvisoryKeys(a: AnyAdvisoryKey, b: AnyAdvisoryKey): number {
  if (typeof a === 'bigint' && typeof b === 'bigint') return a < b ? -1 : a > b ? 1 : 0;
  if (typeof a === 'bigint') return -1;
  if (typeof b === 'bigint') return 1;
  return a.namespace - b.namespace || a.id - b.id;
}

/** The keys deduplicated and in acquisition order ({@link compareAdvisoryKeys}). */
export function sortedUniqueKeys(keys: readonly AnyAdvisoryKey[]): AnyAdvisoryKey[] {
  const seen = new Map<string, AnyAdvisoryKey>();
  for (const key of keys) seen.set(formatAdvisoryKey(key), key);
  return [...seen.values()].sort(compareAdvisoryKeys);
}
