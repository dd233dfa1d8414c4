import fc from 'fast-check';
import { ok } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import { advisoryKey, advisoryKeyPair, isAdvisoryKey } from '../../src/advisory/advisory-key.js';
import { findLeakedAdvisoryLocks } from '../../src/advisory/find-leaked-advisory-locks.js';
import { SessionLock } from '../../src/advisory/session-lock.js';
import { migrateSingleRun, singleRun } from '../../src/advisory/single-run.js';
import { withAdvisoryLock } from '../../src/advisory/with-advisory-lock.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';
import {
  acquireCounter,
  anyValue,
  durationLike,
  expectIntact,
  expectTyped,
  FUZZ_SEED,
  field,
  hostileString,
  installCanary,
  options,
  outcomeOf,
  RUNS,
  stringField,
  Tally,
} from './fuzz-support.js';

// Bad-input fuzzing of the advisory-locks module: hostile keys, options and names.
const { pool, url } = await useTestDatabase();
const acquired = acquireCounter(pool);
await installCanary(pool);
const tm = new TxManager(pool, { defaults: { maxAttempts: 1 } });

const intLike = fc.oneof(
  fc.integer(),
  fc.constantFrom<unknown>(
    -2_147_483_648,
    2_147_483_647,
    2_147_483_648,
    -2_147_483_649,
    0.5,
    -0,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    Number.MAX_SAFE_INTEGER + 2,
    '1',
    1n,
  ),
);
const keyLike = fc.oneof(
  { weight: 3, arbitrary: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }) },
  { weight: 2, arbitrary: fc.record({ namespace: intLike, id: intLike }) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(2n ** 63n, -(2n ** 63n) - 1n, 1, '1', null) },
  { weight: 1, arbitrary: anyValue },
);
const keysLike = fc.oneof(keyLike, fc.array(keyLike, { maxLength: 4 }));

describe('fuzz: advisory locks', () => {
  it('advisoryKey: a bigint key or a thrown InvalidOptions; advisoryKeyPair: a key or InvalidOptions; stable', () => {
    const tally = new Tally();
    fc.assert(
      fc.property(
        fc.oneof(hostileString, fc.string(), anyValue),
        fc.oneof(hostileString, fc.string(), intLike, fc.bigInt(), anyValue),
        (namespace, id) => {
          let key: bigint | undefined;
          let thrown: unknown;
          try {
            key = advisoryKey(namespace as never, id as never);
          } catch (error) {
            thrown = error;
          }
          const label = expectTyped(
            key !== undefined ? { type: 'ok', value: key } : { type: 'threw', error: thrown },
            { throws: true },
          );
          if (key !== undefined) {
            expect(isAdvisoryKey(key)).toBe(true);
            expect(advisoryKey(namespace as never, id as never)).toBe(key);
          }
          tally.add(`key:${label}`);
        },
      ),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    fc.assert(
      fc.property(fc.oneof(intLike, anyValue), fc.oneof(intLike, anyValue), (namespace, id) => {
        const r = advisoryKeyPair(namespace as never, id as never);
        tally.add(
          `pair:${expectTyped(r.isOk() ? { type: 'ok', value: 0 } : { type: 'err', error: r.error })}`,
        );
        if (r.isOk()) expect(isAdvisoryKey(r.value)).toBe(true);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`advisoryKey: ${tally}`);
  });

  it('withAdvisoryLock: keys and options (wait, lockTimeout, tx)', async () => {
    const tally = new Tally();
    const opts = options({
      wait: field(fc.constantFrom('block', 'try', 'nowait')),
      lockTimeout: durationLike,
      tx: field(
        options({
          isolation: field(fc.constantFrom('serializable', 'read committed', 'chaos')),
          propagation: field(fc.constantFrom('required', 'nested', 'requiresNew', 'mandatory', 'never')),
          lockTimeout: durationLike,
          maxAttempts: field(intLike),
        }),
        3,
      ),
    });
    let calls = 0;
    await fc.assert(
      fc.asyncProperty(keysLike, opts, async (keys, o) => {
        const before = acquired();
        const outcome = await outcomeOf(() =>
          withAdvisoryLock(
            tm,
            keys as never,
            () => {
              calls++;
              return ok(1);
            },
            o as never,
          ),
        );
        // NotInTransaction: propagation 'mandatory' outside a transaction (a valid option, a typed refusal).
        const label = expectTyped(outcome, { kinds: ['InvalidOptions', 'NotInTransaction'] });
        if (label === 'InvalidOptions' || label === 'NotInTransaction') {
          expect(acquired() - before, 'refused before SQL').toBe(0);
        }
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`withAdvisoryLock: ${tally} (fn called ${calls})`);
    expect(calls).toBe(tally.get('ok'));
    await expectIntact(pool);
  });

  it('singleRun / migrateSingleRun: name, key, table, tx options', async () => {
    const tally = new Tally();
    expect((await migrateSingleRun(pool)).isOk()).toBe(true);
    const table = stringField(['pg_txkit_single_run', 'public.pg_txkit_single_run']);
    await fc.assert(
      fc.asyncProperty(options({ table }), async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => migrateSingleRun(pool, o as never));
        const label = expectTyped(outcome);
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        tally.add(`migrate:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS / 5 },
    );
    const text = fc.oneof(
      { weight: 2, arbitrary: fc.string({ minLength: 1, maxLength: 6 }) },
      { weight: 2, arbitrary: hostileString },
      { weight: 1, arbitrary: fc.constantFrom<unknown>('x'.repeat(501), 7, null) },
      { weight: 1, arbitrary: anyValue },
    );
    const spec = options({
      name: text,
      key: text,
      table: stringField(['pg_txkit_single_run', 'public.pg_txkit_single_run']),
      tx: field(options({ name: text, maxAttempts: field(intLike) }), 2),
    });
    await fc.assert(
      fc.asyncProperty(spec, fc.jsonValue({ maxDepth: 1 }), async (s, result) => {
        const before = acquired();
        const outcome = await outcomeOf(() => singleRun(tm, s as never, () => result));
        // 42P01: a valid table name that was never migrated (the caller's mistake, reported).
        const label = expectTyped(outcome, {
          kinds: ['InvalidOptions', 'AlreadyDone', 'LockBusy'],
          dbCodes: ['42P01'],
        });
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        tally.add(`run:${label}`);
      }),
      { seed: FUZZ_SEED, numRuns: (RUNS * 4) / 5 },
    );
    console.log(`singleRun: ${tally}`);
    expect(tally.get('run:ok')).toBeGreaterThan(0);
    expect(tally.get('run:AlreadyDone')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  const sessionOptions = {
    wait: field(fc.constantFrom('try', 'block', 'nowait')),
    lockTimeout: durationLike,
    checkEvery: durationLike,
    checkTimeout: durationLike,
    serverIdleTimeout: durationLike,
    pooler: field(fc.constantFrom('detect', 'direct', 'transaction', 'session')),
    applicationName: fc.oneof(hostileString, fc.string({ maxLength: 70 })),
    onLost: field(fc.constant(() => {})),
    signal: field(fc.constant(new AbortController().signal)),
    connectTimeout: durationLike,
  };

  it('SessionLock.acquire options: refused without a connection when invalid', async () => {
    const tally = new Tally();
    // checkEvery < 20 ms is always invalid: every other field is fuzzed around it, and nothing may connect.
    const invalid = options(sessionOptions).map((o) =>
      typeof o === 'object' && o !== null && !Array.isArray(o)
        ? { ...o, checkEvery: 5 }
        : { checkEvery: 5, wait: o },
    );
    const before = await backends();
    await fc.assert(
      fc.asyncProperty(keyLike, invalid, async (key, o) => {
        const outcome = await outcomeOf(() => SessionLock.acquire(url, key as never, o as never));
        tally.add(expectTyped(outcome, { kinds: ['InvalidOptions', 'TransactionPoolerDetected'] }));
      }),
      { seed: FUZZ_SEED, numRuns: RUNS - 300 },
    );
    expect(tally.get('ok')).toBe(0);
    expect(await backends()).toBe(before);
    console.log(`SessionLock (invalid): ${tally}`);
  });

  it('SessionLock.acquire options: fully random (valid ones lock, then release)', async () => {
    const tally = new Tally();
    await fc.assert(
      fc.asyncProperty(fc.bigInt({ min: 1n, max: 1000n }), options(sessionOptions), async (key, o) => {
        const outcome = await outcomeOf(() => SessionLock.acquire(url, key, o as never));
        const label = expectTyped(outcome, {
          // ConnectionLost: connectTimeout of a few ms is valid, and too short to connect.
          kinds: [
            'InvalidOptions',
            'TransactionPoolerDetected',
            'LockBusy',
            'LockNotAvailable',
            'ConnectionLost',
          ],
        });
        if (outcome.type === 'ok') {
          const lock = outcome.value as SessionLock;
          // Not asserting `unlocked`: a valid 1 ms checkTimeout/serverIdleTimeout may already have lost it.
          // What matters is checked below: no advisory lock is left behind.
          await lock.release();
        }
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: 300 },
    );
    console.log(`SessionLock (random): ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    // Every dedicated connection is closed again.
    // (A closed session's backend may take a moment to exit: poll, bounded to 5 s.)
    let leaked = (await findLeakedAdvisoryLocks(pool, { idleFor: 0 }))._unsafeUnwrap();
    for (let i = 0; i < 500 && leaked.length > 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      leaked = (await findLeakedAdvisoryLocks(pool, { idleFor: 0 }))._unsafeUnwrap();
    }
    expect(leaked).toEqual([]);
    await expectIntact(pool);
  });

  it('findLeakedAdvisoryLocks: options', async () => {
    const tally = new Tally();
    const opts = options({ allDatabases: field(fc.boolean()), idleFor: durationLike });
    // 9 in 10 cases carry a negative idleFor (always invalid: no round trip), the rest are random.
    const mostlyInvalid = fc.oneof(
      {
        weight: 9,
        arbitrary: opts.map((o) => (typeof o === 'object' && o !== null ? { ...o, idleFor: -1 } : o)),
      },
      { weight: 1, arbitrary: opts },
    );
    await fc.assert(
      fc.asyncProperty(mostlyInvalid, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => findLeakedAdvisoryLocks(pool, o as never));
        const label = expectTyped(outcome);
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`findLeakedAdvisoryLocks: ${tally}`);
    await expectIntact(pool);
  });
});

/** Dedicated (SessionLock) sessions connected to this test database. */
async function backends(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    // SessionLock always sets a non-empty application_name; the test pool's connections have none.
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name <> ''",
  );
  return rows[0]?.n ?? 0;
}
