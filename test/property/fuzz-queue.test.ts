import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { JobLease } from '../../src/queue/job.js';
import { Queue } from '../../src/queue/queue.js';
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

// Bad-input fuzzing of the queue: options, task names, payloads, keys, durations, errors.
const { pool } = await useTestDatabase();
const acquired = acquireCounter(pool);
await installCanary(pool);
const tm = new TxManager(pool);
const tasks = { email: z.object({ to: z.string() }), any: z.unknown() };
const queue = new Queue({ pool, txManager: tm, schema: 'fzq', tasks });
expect((await queue.migrate()).isOk()).toBe(true);

/** A lease that is nobody's: settles run their SQL and answer LeaseLost. */
const fakeJob = fc.record({
  id: fc.bigInt({ min: 1n, max: 2n ** 62n }).map(String),
  leaseToken: fc.constant(null).map(() => randomUUID()),
}) as fc.Arbitrary<JobLease>;

const intLike = fc.oneof(
  fc.integer({ min: -3, max: 12 }),
  fc.constantFrom<unknown>(0.5, Number.NaN, 2_147_483_648, -2_147_483_649, 1_000_001, '3'),
);
const backoff = field(options({ baseMs: field(intLike), capMs: field(intLike) }), 3);
const dates = fc.oneof(
  fc.date({ min: new Date('2000-01-01'), max: new Date('2100-01-01') }),
  fc.constantFrom<unknown>(new Date(Number.NaN), new Date(8.64e15), '2030-01-01', 0),
);
const taskName = stringField(['email', 'any']);
const payload = fc.oneof(
  { weight: 3, arbitrary: fc.record({ to: fc.oneof(fc.string({ maxLength: 6 }), hostileString) }) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 1, arbitrary: anyValue },
);
const enqueueOptions = {
  runAt: field(dates),
  priority: field(intLike),
  key: fc.oneof(hostileString, fc.string({ minLength: 1, maxLength: 6 }), fc.constant('k'.repeat(1001))),
  maxAttempts: field(intLike),
  backoff,
};
/** Values that are fine to meet: a date far out of PostgreSQL's range (22008). */
const DATE_CODES = ['22008'];

describe('fuzz: queue', () => {
  it('new Queue(options): InvalidOptions thrown (a configuration defect), never a TypeError', () => {
    const tally = new Tally();
    const opts = options({
      pool: field(fc.constant(pool), 6),
      txManager: field(fc.constant(tm), 6),
      schema: stringField(['fzq', 'jobs', 'Jobs', 'a'.repeat(42)]),
      tasks: field(
        fc.dictionary(
          stringField(['email', 'a\u0000b', '']),
          fc.constantFrom<unknown>(z.string(), 'zod', null),
        ),
        3,
      ),
      archive: field(fc.boolean()),
      maxAttempts: field(intLike),
      backoff,
      lease: durationLike,
    });
    fc.assert(
      fc.property(opts, (o) => {
        let outcome: { type: 'ok'; value: unknown } | { type: 'threw'; error: unknown };
        try {
          outcome = { type: 'ok', value: new Queue(o as never) };
        } catch (error) {
          outcome = { type: 'threw', error };
        }
        tally.add(expectTyped(outcome, { throws: true }));
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`new Queue: ${tally}`);
  });

  it('enqueue: task, payload, options (nothing sent when refused)', async () => {
    const tally = new Tally();
    await fc.assert(
      fc.asyncProperty(taskName, payload, options(enqueueOptions), async (task, p, o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => queue.enqueue(pool, task as never, p as never, o as never));
        const label = expectTyped(outcome, { kinds: ['InvalidOptions', 'UnknownTask'], dbCodes: DATE_CODES });
        if (label === 'InvalidOptions' || label === 'UnknownTask') expect(acquired() - before).toBe(0);
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`enqueue: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('enqueueMany: payload lists, keys, options', async () => {
    const tally = new Tally();
    const { key: _key, ...manyFields } = enqueueOptions;
    const many = options({
      ...manyFields,
      keys: field(
        fc.array(fc.option(fc.oneof(hostileString, fc.string({ maxLength: 4 }))), { maxLength: 4 }),
      ),
    });
    await fc.assert(
      fc.asyncProperty(
        taskName,
        fc.oneof(fc.array(payload, { maxLength: 4 }), anyValue),
        many,
        async (task, payloads, o) => {
          const before = acquired();
          const outcome = await outcomeOf(() =>
            queue.enqueueMany(pool, task as never, payloads as never, o as never),
          );
          const label = expectTyped(outcome, {
            kinds: ['InvalidOptions', 'UnknownTask'],
            dbCodes: DATE_CODES,
            // A non-array `payloads` is a type error the compiler catches; at run time it must not be
            // an untyped throw either, so it is not allowed here.
          });
          if (label === 'InvalidOptions' || label === 'UnknownTask') expect(acquired() - before).toBe(0);
          tally.add(label);
        },
      ),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`enqueueMany: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('claim: batch, lease, tasks', async () => {
    const tally = new Tally();
    const opts = options({
      batch: field(intLike),
      lease: durationLike,
      tasks: field(fc.array(taskName, { maxLength: 3 })),
    });
    // Mostly refused (batch: 0), one case in ten random: each valid claim is a round trip.
    const mostlyInvalid = fc.oneof(
      {
        weight: 9,
        arbitrary: opts.map((o) => (typeof o === 'object' && o !== null ? { ...o, batch: 0 } : o)),
      },
      { weight: 1, arbitrary: opts },
    );
    await fc.assert(
      fc.asyncProperty(mostlyInvalid, async (o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => queue.claim(o as never));
        const label = expectTyped(outcome);
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`claim: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('fail: error values and options (of a lease that is not ours: LeaseLost)', async () => {
    const tally = new Tally();
    const failOptions = options({ retryIn: durationLike, final: field(fc.boolean()) });
    const errorValue = fc.oneof(hostileString, fc.string(), anyValue, fc.constant(new Error('boom\u0000')));
    // Four cases in five carry an invalid `final` (refused before SQL); the rest reach the fenced UPDATE.
    const mostlyInvalid = fc.oneof(
      {
        weight: 4,
        arbitrary: failOptions.map((o) => (typeof o === 'object' && o !== null ? { ...o, final: 'yes' } : o)),
      },
      { weight: 1, arbitrary: failOptions },
    );
    await fc.assert(
      fc.asyncProperty(fakeJob, errorValue, mostlyInvalid, async (job, e, o) => {
        const before = acquired();
        const outcome = await outcomeOf(() => queue.fail(job, e, o as never));
        const label = expectTyped(outcome, { kinds: ['InvalidOptions', 'LeaseLost'] });
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        expect(label).not.toBe('ok'); // nobody holds these leases
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`fail: ${tally}`);
    expect(tally.get('LeaseLost')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('extend: lease durations (of a lease that is not ours: LeaseLost)', async () => {
    const tally = new Tally();
    const lease = fc.oneof(
      {
        weight: 4,
        arbitrary: fc.constantFrom<unknown>(-1, 1.5, Number.NaN, 1e20, '1d', '', '1s; SELECT 1', null),
      },
      { weight: 1, arbitrary: durationLike },
    );
    await fc.assert(
      fc.asyncProperty(fakeJob, lease, async (job, l) => {
        const before = acquired();
        const outcome = await outcomeOf(() => queue.extend(job, l as never));
        const label = expectTyped(outcome, { kinds: ['InvalidOptions', 'LeaseLost'] });
        if (label === 'InvalidOptions') expect(acquired() - before).toBe(0);
        expect(label).not.toBe('ok');
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`extend: ${tally}`);
    expect(tally.get('LeaseLost')).toBeGreaterThan(0);
    await expectIntact(pool);
  });

  it('fail with an error text holding NUL still records the failure (the job does not stay running)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(hostileString, fc.string()), async (message) => {
        const job = (await queue.enqueue(pool, 'email', { to: 'x' }))._unsafeUnwrap();
        const claimed = (await queue.claim({ batch: 1000, tasks: ['email'] }))._unsafeUnwrap();
        const mine = claimed.find((j) => j.id === job.id);
        expect(mine).toBeDefined();
        const failed = await queue.fail(mine as JobLease, new Error(message), { final: true });
        expect(failed._unsafeUnwrap().state).toBe('dead');
        for (const other of claimed) if (other.id !== job.id) await queue.complete(other);
      }),
      { seed: FUZZ_SEED, numRuns: 40 },
    );
    await expectIntact(pool);
  });

  it('work(handlers, options): invalid options throw InvalidOptions; valid workers start and stop', async () => {
    const tally = new Tally();
    const workOptions = options({
      concurrency: field(intLike),
      batch: field(intLike),
      prefetch: field(intLike),
      pollInterval: durationLike,
      listen: field(fc.boolean()),
      lease: durationLike,
      handlerTimeout: durationLike,
      graceMs: durationLike,
      batchSettles: field(fc.boolean()),
      settleDelay: durationLike,
      maxSettleBatch: field(intLike),
      reapInterval: durationLike,
    });
    await fc.assert(
      fc.asyncProperty(workOptions, fc.integer({ min: 0, max: 19 }), async (o, pick) => {
        // Most cases carry an invalid concurrency (0: refused at once); one in twenty starts a worker.
        const input = pick === 0 || typeof o !== 'object' || o === null ? o : { ...o, concurrency: 0 };
        const outcome = await outcomeOf(() => queue.work({ email: async () => {} }, input as never));
        const label = expectTyped(outcome, { throws: true });
        if (outcome.type === 'ok') {
          const worker = outcome.value as { stop(): Promise<void> };
          await worker.stop();
        }
        tally.add(label);
      }),
      { seed: FUZZ_SEED, numRuns: RUNS },
    );
    console.log(`work: ${tally}`);
    expect(tally.get('ok')).toBeGreaterThan(0);
    await expectIntact(pool);
  });
});
