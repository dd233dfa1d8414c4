// The handler runner past a handler's timeout, with fakes for the store and the settle batcher (no
// database): what ends a run whose handler ignores its aborted signal, and what is written for it.
import { ok, okAsync } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import type { DatabaseFailure, InvalidOptions } from '../../src/errors/errors.js';
import { QueueTelemetry } from '../../src/observability/queue-telemetry.js';
import type { Job } from '../../src/queue/job.js';
import {
  type BufferedJob,
  HandlerRunner,
  type RunnerSettings,
  type RunnerStore,
  type Running,
} from '../../src/queue/worker/handler-runner.js';
import type { SettleBatcher } from '../../src/queue/worker/settle-batcher.js';
import type { JobEndEvent, JobHandler } from '../../src/queue/worker/work-options.js';
import { gate } from '../../src/testing/gate.js';

const job = { id: '1', task: 'work', payload: {}, attempts: 1, maxAttempts: 5 } as unknown as Job;

/**
 * A runner with one `work` handler, a 1 ms timeout and a lease of 30 s; `leased` says which jobs the
 * heartbeat's extension still finds leased.
 */
function runner(work: JobHandler<unknown>, leased: Set<string>) {
  const settles: string[] = [];
  const extended: string[][] = [];
  const ends: JobEndEvent[] = [];
  const errors: unknown[] = [];
  const store = {
    extendMany: (jobs: readonly Job[]) => {
      extended.push(jobs.map((j) => j.id));
      return okAsync(new Set(jobs.map((j) => j.id).filter((id) => leased.has(id))));
    },
    writeProgress: () => okAsync(undefined),
    completeWithin: async () => true,
  } as unknown as RunnerStore;
  const settings = {
    telemetry: new QueueTelemetry(undefined, undefined, 'q'),
    schemaOf: () => undefined,
  } as unknown as RunnerSettings;
  // The settles the runner asks for, written at once.
  const batcher = {
    complete: (j: Job, running: Running, then: (o: unknown, r: Running) => void) => {
      settles.push(`complete ${j.id}`);
      then(ok('completed'), running);
    },
    fail: (item: { job: Job; error: string }, running: Running, then: (o: unknown, r: Running) => void) => {
      settles.push(`fail ${item.job.id}: ${item.error}`);
      then(ok({ state: 'pending', runAt: new Date() }), running);
    },
  } as unknown as SettleBatcher<Running>;
  const r = new HandlerRunner(
    store,
    settings,
    batcher,
    {
      handlers: { work },
      leaseMs: 30_000,
      handlerTimeout: 1,
      hooks: { onJobEnd: (e) => ends.push(e) },
      progressIntervalMs: 1000,
    },
    { onSlotFree: () => {}, onOutcome: () => {}, onError: (e) => errors.push(e) },
  );
  const heartbeat = async (): Promise<number | undefined | InvalidOptions | DatabaseFailure> => {
    const h = await r.heartbeat([] as BufferedJob[]);
    return h.isOk() ? h.value : h.error;
  };
  return { r, settles, extended, ends, errors, heartbeat };
}

/** A handler that ignores its signal: it waits at `held` until the test opens it. */
function ignoring(g: ReturnType<typeof gate>): JobHandler<unknown> {
  return async (_job, { signal }) => {
    signal.addEventListener('abort', () => void g.at('aborted'), { once: true });
    await g.at('held');
    return 'a value';
  };
}

describe('HandlerRunner past a handler timeout', () => {
  it('keeps the run, its slot and its lease until the handler returns, then fails the attempt with the timeout', async () => {
    const g = gate();
    const t = runner(ignoring(g), new Set(['1']));
    t.r.start(job, 0);
    await g.reached('aborted');
    expect(t.r.size).toBe(1);
    await t.heartbeat();
    expect(t.extended).toEqual([['1']]);
    expect(t.settles).toEqual([]);
    g.open('held');
    await t.r.settled();
    expect(t.errors).toEqual([]);
    expect(t.r.size).toBe(0);
    expect(t.settles).toEqual(['fail 1: HandlerTimeout: handler timed out after 1 ms']);
    expect(t.ends.map((e) => [e.outcome, (e.error as Error).name])).toEqual([['failed', 'HandlerTimeout']]);
  });

  it('a cancel heard after the timeout ends the run cancelled when the handler returns, nothing written', async () => {
    const g = gate();
    const t = runner(ignoring(g), new Set(['1']));
    t.r.start(job, 0);
    await g.reached('aborted');
    expect(t.r.cancel('1')).toBe(true);
    expect(t.r.size).toBe(1); // still waiting for its handler
    // No longer extended: the job is gone.
    await t.heartbeat();
    expect(t.extended).toEqual([]);
    g.open('held');
    await t.r.settled();
    expect(t.errors).toEqual([]);
    expect(t.settles).toEqual([]);
    expect(t.ends.map((e) => [e.outcome, (e.error as { kind?: string }).kind])).toEqual([
      ['cancelled', 'JobCancelled'],
    ]);
  });

  it('a lease the heartbeat finds lost after the timeout ends the run lost when the handler returns, nothing written', async () => {
    const g = gate();
    const t = runner(ignoring(g), new Set());
    t.r.start(job, 0);
    await g.reached('aborted');
    await t.heartbeat();
    expect(t.extended).toEqual([['1']]);
    expect(t.r.size).toBe(1); // still waiting for its handler
    g.open('held');
    await t.r.settled();
    expect(t.errors).toEqual([]);
    expect(t.settles).toEqual([]);
    expect(t.ends.map((e) => [e.outcome, (e.error as { kind?: string }).kind])).toEqual([
      ['lost', 'LeaseLost'],
    ]);
  });

  it('a handler that never returns is given up by abandon() (a stopping worker): unsettled, nothing written', async () => {
    const g = gate();
    const t = runner(ignoring(g), new Set(['1']));
    t.r.start(job, 0);
    await g.reached('aborted');
    t.r.abortForStop();
    expect(t.r.abandon()).toEqual([job]);
    await t.r.settled();
    expect(t.errors).toEqual([]);
    expect(t.r.takeReleased()).toEqual([]);
    expect(t.settles).toEqual([]);
    expect(t.ends.map((e) => e.outcome)).toEqual(['unsettled']);
  });
});
