// The settle batcher's completions with a worker's take-over of group slots: which statement a batch
// goes to, and where the jobs taken over go. A fake store: no database.
import { errAsync, okAsync } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import { DbError } from '../../src/errors/errors.js';
import type { ClaimedLease, Job } from '../../src/queue/job.js';
import type { SettleStore } from '../../src/queue/store/job-store.js';
import { SettleBatcher } from '../../src/queue/worker/settle-batcher.js';

type Store = Pick<SettleStore, 'completeClaimed' | 'completeAndTakeNext' | 'failMany'>;

const lease = (id: string, group: string | null): ClaimedLease => ({
  id,
  leaseToken: '00000000-0000-4000-8000-000000000000',
  group,
});
const next = { id: '9', task: 'work', group: 'g' } as unknown as Job;

/** A store that records which completion statement each batch went to. */
function fakeStore(takeNext: Store['completeAndTakeNext']) {
  const calls: string[] = [];
  const store: Store = {
    completeClaimed: (jobs) => {
      calls.push(`plain:${jobs.length}`);
      return okAsync({ completed: jobs.map((j) => j.id), lost: [], invalid: [] });
    },
    completeAndTakeNext: (jobs, options) => {
      calls.push(`take:${jobs.length}:${options.lease}:${options.tasks.join(',')}:${options.max}`);
      return takeNext(jobs, options);
    },
    failMany: () => okAsync(new Map()),
  };
  return { store, calls };
}

async function completeTwo(batcher: SettleBatcher<string>) {
  const outcomes: string[] = [];
  for (const job of [lease('1', 'g'), lease('2', null)])
    batcher.complete(job, job.id, (o, id) => outcomes.push(`${id}:${o.isOk() ? o.value : o.error.kind}`));
  await batcher.flush();
  return outcomes;
}

describe('SettleBatcher with takeOver', () => {
  it("sends a batch through completeAndTakeNext with the worker's lease and tasks, then hands the jobs taken over to taken()", async () => {
    const { store, calls } = fakeStore((jobs) =>
      okAsync({ completed: jobs.map((j) => j.id), lost: [], invalid: [], next: [next] }),
    );
    const taken: [Job[], number][] = [];
    const batcher = new SettleBatcher<string>(store, {
      enabled: true,
      delayMs: 0,
      maxBatch: 100,
      takeOver: {
        params: (grouped) => ({ lease: 30_000, tasks: ['work'], max: grouped + 6 }),
        taken: (jobs, params) => taken.push([jobs, params.max]),
      },
    });
    expect(await completeTwo(batcher)).toEqual(['1:completed', '2:completed']);
    expect(calls).toEqual(['take:2:30000:work:7']);
    expect(taken).toEqual([[[next], 7]]);
  });

  it('completes without taking over when params() says no (a stopping worker), and without takeOver at all', async () => {
    for (const takeOver of [
      { params: () => undefined, taken: () => expect.fail('nothing taken') },
      undefined,
    ]) {
      const { store, calls } = fakeStore(() => expect.fail('no take-over'));
      const batcher = new SettleBatcher<string>(store, {
        enabled: true,
        delayMs: 0,
        maxBatch: 100,
        takeOver,
      });
      expect(await completeTwo(batcher)).toEqual(['1:completed', '2:completed']);
      expect(calls).toEqual(['plain:2']);
    }
  });

  it('reports a failed take-over (a database failure) on every job of the batch, takes nothing, and frees the reservation', async () => {
    const { store } = fakeStore(() => errAsync(new DbError('57P01', 'terminating connection')));
    const taken: [Job[], number][] = [];
    const batcher = new SettleBatcher<string>(store, {
      enabled: true,
      delayMs: 0,
      maxBatch: 100,
      takeOver: {
        params: () => ({ lease: -1, tasks: ['work'], max: 3 }),
        taken: (jobs, params) => taken.push([jobs, params.max]),
      },
    });
    expect(await completeTwo(batcher)).toEqual(['1:DbError', '2:DbError']);
    expect(taken).toEqual([[[], 3]]);
  });
});
