// Type-level tests of the public signatures, through the package's entry (src/index.ts). They are
// checked by `npm run typecheck` (tsc over test/); at run time the bodies are only declared, never
// called (the values are `declare`d, not built).
import type { Result, ResultAsync } from 'neverthrow';
import type pg from 'pg';
import { describe, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  type Bookings,
  type Capabilities,
  type capabilities,
  type DatabaseFailure,
  type Db,
  type insertOnce,
  type Job,
  type lockRows,
  Queue,
  type RateLimit,
  type SessionLock,
  type safeDdl,
  singleRun,
  type TxManager,
  type updateWhere,
  withAdvisoryLock,
} from '../../src/index.js';

/** Declares a block of type assertions without running it. */
const typesOnly = (block: () => void): void => {
  expectTypeOf(block).toBeFunction();
};

/** The `kind`s an operation's Err can carry. */
type ErrKinds<R> =
  R extends ResultAsync<unknown, infer E> ? (E extends { kind: infer K } ? K : never) : never;
type DbKinds = DatabaseFailure['kind'];

declare const pool: pg.Pool;
declare const db: Db;
declare const tm: TxManager;

const tasks = {
  email: z.object({ to: z.email() }),
  resize: z.object({ url: z.url(), width: z.number().int().default(800) }),
};
declare const queue: Queue<typeof tasks>;

describe('queue payload types come from the task schemas', () => {
  it('enqueue takes the schema input (defaults optional); an unknown task name does not compile', () =>
    typesOnly(() => {
      expectTypeOf(queue.enqueue<'resize'>)
        .parameter(2)
        .toEqualTypeOf<{ url: string; width?: number | undefined }>();
      expectTypeOf(queue.enqueue<'email'>)
        .parameter(2)
        .toEqualTypeOf<{ to: string }>();
      // @ts-expect-error: no such task
      queue.enqueue(db, 'sms', { to: 'x' });
      // @ts-expect-error: a payload of the wrong shape
      queue.enqueue(db, 'email', { address: 'x' });
    }));

  it("a handler's job.payload is the schema output (defaults applied)", () =>
    typesOnly(() => {
      queue.work({
        resize: (job) => {
          expectTypeOf(job).toEqualTypeOf<Job<{ url: string; width: number }>>();
        },
        email: (job) => {
          expectTypeOf(job.payload).toEqualTypeOf<{ to: string }>();
        },
      });
    }));

  it('a Standard Schema that is not zod types its payloads too', () =>
    typesOnly(() => {
      const positive = {
        '~standard': {
          version: 1 as const,
          vendor: 'hand-written',
          validate: (v: unknown) =>
            typeof v === 'number' ? { value: v } : { issues: [{ message: 'a number' }] },
          types: undefined as { input: number; output: number } | undefined,
        },
      };
      const q = new Queue({ pool, txManager: tm, tasks: { n: positive } });
      expectTypeOf(q.enqueue<'n'>)
        .parameter(2)
        .toEqualTypeOf<number>();
    }));

  it("a schedule names one of the queue's tasks, and requires names tasks too", () =>
    typesOnly(() => {
      new Queue({
        pool,
        txManager: tm,
        tasks,
        schedules: {
          nightly: { cron: '0 3 * * *', tz: 'Europe/Paris', task: 'email', missed: { catchUp: 2 } },
        },
        requires: { email: ['smtp'] },
      });
      // @ts-expect-error: no such task
      new Queue({ pool, txManager: tm, tasks, schedules: { nightly: { every: '1h', task: 'sms' } } });
      // @ts-expect-error: requires of an unknown task
      new Queue({ pool, txManager: tm, tasks, requires: { sms: ['x'] } });
      expectTypeOf<ErrKinds<ReturnType<typeof queue.fireSchedules>>>().toEqualTypeOf<
        'InvalidOptions' | DbKinds
      >();
    }));

  it('a rate takes an optional guard, a duration like its period', () =>
    typesOnly(() => {
      new Queue({
        pool,
        txManager: tm,
        tasks,
        taskRates: { email: { limit: 10, per: '1s' } },
        groups: { default: { rate: { limit: 4, per: 250, guard: '20ms' } } },
      });
      expectTypeOf<RateLimit['guard']>().toEqualTypeOf<number | string | undefined>();
      // @ts-expect-error: a guard is a duration
      new Queue({ pool, txManager: tm, tasks, taskRates: { email: { limit: 10, per: '1s', guard: true } } });
    }));

  it('error kinds of the queue operations', () =>
    typesOnly(() => {
      expectTypeOf<ErrKinds<ReturnType<typeof queue.enqueue>>>().toEqualTypeOf<
        'UnknownTask' | 'InvalidOptions' | 'NotFound' | DbKinds
      >();
      expectTypeOf<ErrKinds<ReturnType<typeof queue.claim>>>().toEqualTypeOf<'InvalidOptions' | DbKinds>();
      expectTypeOf<ErrKinds<ReturnType<typeof queue.complete>>>().toEqualTypeOf<
        'LeaseLost' | 'InvalidOptions' | DbKinds
      >();
    }));

  it("the worker's statements are not the queue's public methods", () =>
    typesOnly(() => {
      // The worker runs them on the queue's JobStatements; the public Queue has its user methods only.
      expectTypeOf(queue).not.toHaveProperty('claimBatch');
      expectTypeOf(queue).not.toHaveProperty('completeClaimed');
      expectTypeOf(queue).not.toHaveProperty('completeAndTakeNext');
      expectTypeOf(queue).not.toHaveProperty('writeProgress');
      expectTypeOf(queue).not.toHaveProperty('completeWithin');
      expectTypeOf(queue).not.toHaveProperty('schemaOf');
      // Control: a user method is a property (the assertion can fail).
      expectTypeOf(queue).toHaveProperty('completeMany');
    }));
});

describe('error kinds per function', () => {
  it('patterns', () =>
    typesOnly(() => {
      expectTypeOf<ErrKinds<ReturnType<typeof updateWhere>>>().toEqualTypeOf<
        'ConditionFailed' | 'NotFound' | 'InvalidOptions' | DbKinds
      >();
      expectTypeOf<ErrKinds<ReturnType<typeof lockRows>>>().toEqualTypeOf<
        'InvalidOptions' | 'NotInTransaction' | DbKinds
      >();
      expectTypeOf<ErrKinds<ReturnType<typeof insertOnce>>>().toEqualTypeOf<'InvalidOptions' | DbKinds>();
      expectTypeOf<ErrKinds<ReturnType<typeof safeDdl>>>().toEqualTypeOf<
        'InvalidOptions' | 'RetriesExhausted' | DbKinds
      >();
      expectTypeOf<ErrKinds<ReturnType<Bookings['migrate']>>>().toEqualTypeOf<
        'InvalidOptions' | 'Unsupported' | DbKinds
      >();
    }));

  it('capabilities: a frozen object, or the database failure that stopped it', () =>
    typesOnly(() => {
      type Detected = Awaited<ReturnType<typeof capabilities>>;
      expectTypeOf<Detected>().toEqualTypeOf<Result<Capabilities, DatabaseFailure>>();
      expectTypeOf<Capabilities['btreeGist']>().toEqualTypeOf<
        'installed' | 'installable' | 'not-permitted' | 'read-only' | 'unavailable'
      >();
      expectTypeOf<Capabilities['listenNotify']>().toEqualTypeOf<boolean>();
    }));

  it('advisory locks: the callback’s own error type joins the lock’s kinds', () =>
    typesOnly(() => {
      const locked = withAdvisoryLock(tm, 1n, () => 42);
      expectTypeOf(locked).toExtend<ResultAsync<number, unknown>>();
      expectTypeOf<ErrKinds<typeof locked>>().toEqualTypeOf<
        'LockBusy' | 'LockNotAvailable' | 'InvalidOptions' | 'RetriesExhausted' | 'NotInTransaction' | DbKinds
      >();
      const once = singleRun(tm, { name: 'daily', key: '2026-01-01' }, () => 'posted' as const);
      expectTypeOf(once).toExtend<ResultAsync<'posted', unknown>>();
      expectTypeOf<ErrKinds<typeof once>>().toEqualTypeOf<
        'AlreadyDone' | 'LockBusy' | 'InvalidOptions' | 'RetriesExhausted' | 'NotInTransaction' | DbKinds
      >();
      expectTypeOf<ErrKinds<ReturnType<typeof SessionLock.acquire>>>().toEqualTypeOf<
        | 'InvalidOptions'
        | 'LockBusy'
        | 'LockNotAvailable'
        | 'TransactionPoolerDetected'
        | 'ConnectionLost'
        | DbKinds
      >();
    }));
});

describe('afterCommit / afterRollback take ordinary callbacks', () => {
  it('a callback may return a value or a promise of one (awaited, the value ignored)', () =>
    typesOnly(() => {
      const mailer = { send: async (_to: string): Promise<{ messageId: string }> => ({ messageId: 'm1' }) };
      void tm.do((tx) => {
        tx.afterCommit(() => mailer.send('ann@example.com'));
        tx.afterCommit(() => 42);
        tx.afterCommit(async () => {});
        tx.afterRollback((error) => mailer.send(String(error)));
        tx.afterRollback(() => undefined);
        // @ts-expect-error: afterCommit callbacks take no argument
        tx.afterCommit((_x: string) => 1);
        // @ts-expect-error: a callback, not a value
        tx.afterCommit(mailer.send('x'));
      });
    }));
});
