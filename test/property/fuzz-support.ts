// Shared pieces of the bad-input fuzz suite (test/property/fuzz-*.test.ts): hostile inputs, a canary that
// proves no injected statement ran, the outcome oracle ("a value or a typed error, never a TypeError, never
// a 42xxx from our own SQL") and a pool-leak check.
import fc from 'fast-check';
import { Err, Ok } from 'neverthrow';
import type pg from 'pg';
import { expect } from 'vitest';
import { TxKitError } from '../../src/errors/index.js';

/** One fixed seed for the whole suite: a failure prints its path and replays exactly. */
export const FUZZ_SEED = 0x7c_15_20_26;

/** Runs per function in total across the suite: split between the tests of a function. */
export const RUNS = 10_000;

/** The tables injection attempts aim at: the canary must survive, nothing may be written to `fuzz_injected`. */
export async function installCanary(pool: pg.Pool): Promise<void> {
  await pool.query(`CREATE TABLE IF NOT EXISTS fuzz_canary (id int PRIMARY KEY);
    INSERT INTO fuzz_canary VALUES (1) ON CONFLICT DO NOTHING;
    CREATE TABLE IF NOT EXISTS fuzz_injected (note text)`);
}

/** SQL-injection payloads for identifiers, keys, names, durations and values. */
export const INJECTIONS = [
  'fuzz_canary; DROP TABLE fuzz_canary; --',
  'fuzz_canary"; DROP TABLE fuzz_canary; --',
  "x\"; INSERT INTO fuzz_injected VALUES ('ident'); --",
  "x'); INSERT INTO fuzz_injected VALUES ('value'); --",
  "'; INSERT INTO fuzz_injected VALUES ('quote'); --",
  '1; INSERT INTO fuzz_injected VALUES (1)',
  "1s'; INSERT INTO fuzz_injected VALUES ('duration'); --",
  '500ms; DROP TABLE fuzz_canary',
  '1 OR 1=1',
  'public.fuzz_canary; DROP TABLE fuzz_canary',
  'fuzz_canary/*',
  'fuzz_canary--',
  '$1',
  '$$; DROP TABLE fuzz_canary; $$',
  "E'\\x27; DROP TABLE fuzz_canary",
  'U&"\\0064rop"',
  '"fuzz_canary"',
  'fuzz_canary\u0000; DROP TABLE fuzz_canary',
] as const;

/** Strings that are not plain identifiers (or are, at the edge). */
const ODD_NAMES = [
  '',
  ' ',
  'a.b.c',
  '.a',
  'a.',
  '1abc',
  '$a',
  'é',
  'ｓｅｌｅｃｔ',
  'a'.repeat(63),
  'a'.repeat(64),
  'a b',
  'a\nb',
  'a\u0000b',
  '\ud800',
  'select',
  'CONSTRUCTOR',
  'constructor',
  '__proto__',
  'toString',
  'hasOwnProperty',
] as const;

/** Hostile strings: injection payloads and odd names. */
export const hostileString = fc.constantFrom<string>(...INJECTIONS, ...ODD_NAMES);

/** Any JS value, including odd ones (null-prototype objects, boxed values, typed arrays, big ints). */
export const anyValue = fc.anything({
  maxDepth: 2,
  maxKeys: 4,
  withBigInt: true,
  withDate: true,
  withMap: true,
  withSet: true,
  withNullPrototype: true,
  withObjectString: true,
  withBoxedValues: true,
  withTypedArray: true,
  withSparseArray: true,
});

/** A plausible-or-hostile string field: one of `good`, a hostile string, a random string. */
export function stringField(good: readonly string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...good) },
    { weight: 3, arbitrary: hostileString },
    { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
  );
}

/** A field that is usually of the right kind, sometimes anything at all. */
export function field<T>(good: fc.Arbitrary<T>, weightGood = 4): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: weightGood, arbitrary: good }, { weight: 1, arbitrary: anyValue });
}

/** A duration-like input: valid ones, edge numbers, hostile strings. */
export const durationLike: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom<unknown>(0, 1, 250, '500ms', '2s', '1m', '1.5s', 2_147_483_647) },
  {
    weight: 2,
    arbitrary: fc.constantFrom<unknown>(
      -1,
      0.5,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      2_147_483_648,
      1e20,
      Number.MAX_SAFE_INTEGER,
      '99999999999999999999h',
      '1e3',
      '10 seconds',
      '-1s',
      '1.0001ms',
      ' 2s ',
      '2S',
      '1d',
      '',
      10n,
    ),
  },
  { weight: 1, arbitrary: hostileString },
  { weight: 1, arbitrary: anyValue },
);

/** Optional field: absent (undefined) half the time. */
export function maybe<T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> {
  return fc.option(arb, { nil: undefined, freq: 2 });
}

/** Builds an options object from optional fields, omitting the undefined ones (plus sometimes an unknown key). */
export function options(fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<unknown> {
  const record = fc.record(
    Object.fromEntries(Object.entries(fields).map(([k, a]) => [k, maybe(a)])) as Record<
      string,
      fc.Arbitrary<unknown>
    >,
  );
  const clean = record.map((o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)));
  return fc.oneof(
    { weight: 12, arbitrary: clean },
    { weight: 1, arbitrary: clean.map((o) => ({ ...o, unknownOption: 1 })) },
    { weight: 1, arbitrary: anyValue },
  );
}

/** What a call did. */
export type Outcome =
  | { readonly type: 'ok'; readonly value: unknown }
  | { readonly type: 'err'; readonly error: unknown }
  | { readonly type: 'threw'; readonly error: unknown };

/** Runs a call that returns a value, a Result, a ResultAsync or a promise of one; never rejects. */
export async function outcomeOf(call: () => unknown): Promise<Outcome> {
  try {
    const value = await call();
    if (value instanceof Ok) return { type: 'ok', value: value.value };
    if (value instanceof Err) return { type: 'err', error: value.error };
    return { type: 'ok', value };
  } catch (error) {
    return { type: 'threw', error };
  }
}

/** What the oracle accepts besides success. */
export interface Expectation {
  /** Error kinds the call may return (default: InvalidOptions). */
  readonly kinds?: readonly string[];
  /** SQLSTATEs a `DbError`/other database failure may carry (e.g. 42P01 for a valid but absent table). */
  readonly dbCodes?: readonly string[];
  /** The function reports bad options by throwing a typed error (constructors, `work()`): allowed. */
  readonly throws?: boolean;
}

function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return `${error.constructor.name}${code ? ` ${String(code)}` : ''}: ${error.message}`;
  }
  return String(error);
}

/**
 * The oracle: success, or a TxKitError of an expected kind. A thrown TypeError (or any untyped throw),
 * a syntax error (42601) or any database error code not listed fails the property. Returns a label.
 */
export function expectTyped(outcome: Outcome, expected: Expectation = {}): string {
  if (outcome.type === 'ok') return 'ok';
  const kinds = expected.kinds ?? ['InvalidOptions'];
  const error = outcome.error;
  if (outcome.type === 'threw' && !expected.throws) {
    expect.fail(`threw instead of returning a typed error: ${describeError(error)}`);
  }
  if (!(error instanceof TxKitError)) expect.fail(`untyped error: ${describeError(error)}`);
  const code = (error as { code?: unknown }).code;
  if (code === '42601') expect.fail(`SQL syntax error from our SQL: ${error.message}`);
  if (typeof code === 'string' && error.kind !== 'InvalidOptions') {
    if (!(expected.dbCodes ?? []).includes(code)) {
      expect.fail(`unexpected database error ${error.kind} ${code}: ${error.message}`);
    }
    return `${error.kind}:${code}`;
  }
  if (!kinds.includes(error.kind)) expect.fail(`unexpected error kind ${error.kind}: ${error.message}`);
  return outcome.type === 'threw' ? `throw:${error.kind}` : error.kind;
}

/** Counts connections checked out of the pool (every statement sent through the pool takes one). */
export function acquireCounter(pool: pg.Pool): () => number {
  let n = 0;
  pool.on('acquire', () => {
    n++;
  });
  return () => n;
}

/**
 * After a batch: no client checked out, no session of this database idle in transaction, the canary
 * table intact, nothing injected.
 */
export async function expectIntact(pool: pg.Pool): Promise<void> {
  expect(pool.totalCount - pool.idleCount, 'clients checked out').toBe(0);
  expect(pool.waitingCount).toBe(0);
  const { rows } = await pool.query<{ canary: number; injected: number; idle_tx: number }>(
    `SELECT (SELECT count(*)::int FROM fuzz_canary) AS canary,
            (SELECT count(*)::int FROM fuzz_injected) AS injected,
            (SELECT count(*)::int FROM pg_stat_activity
              WHERE datname = current_database() AND state LIKE 'idle in transaction%') AS idle_tx`,
  );
  expect(rows[0]).toEqual({ canary: 1, injected: 0, idle_tx: 0 });
}

/** Tally of outcome labels, printed per test (how many cases reached SQL, how many were refused). */
export class Tally {
  readonly #counts = new Map<string, number>();
  add(label: string): void {
    this.#counts.set(label, (this.#counts.get(label) ?? 0) + 1);
  }
  get(label: string): number {
    return this.#counts.get(label) ?? 0;
  }
  toString(): string {
    return [...this.#counts.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
  }
}
