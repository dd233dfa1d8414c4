// Bad input to the queue: a typed error for that input, before any SQL where it can be decided
// locally, and nothing else lost (one malformed item does not fail the rest of its batch).
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { url } = await useTestDatabase({ max: 2 });
const pool = new pg.Pool({ connectionString: url });
const pools = [pool];
afterAll(() => Promise.all(pools.map((p) => p.end())));
const tasks = { email: z.object({ to: z.string() }) };
let seq = 0;

/** A queue whose pool counts the statements sent to the server. */
async function freshQueue() {
  const schema = `q_bad_${++seq}`;
  const setup = new Queue({ pool, txManager: new TxManager(pool), schema, tasks });
  (await setup.migrate())._unsafeUnwrap();
  const sent: string[] = [];
  const counting = new pg.Pool({ connectionString: url, max: 2 });
  const query = counting.query.bind(counting) as (...args: unknown[]) => unknown;
  Object.assign(counting, {
    query: (...args: unknown[]) => {
      sent.push(String(args[0]));
      return query(...args);
    },
  });
  pools.push(counting);
  const queue = new Queue({ pool: counting, txManager: new TxManager(counting), schema, tasks });
  return { queue, sent };
}

const BEYOND_BIGINT = '9223372036854775808';

describe('ids beyond bigint', () => {
  it('cancel: NotFound, nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    const r = await queue.cancel(BEYOND_BIGINT);
    expect(r._unsafeUnwrapErr().kind).toBe('NotFound');
    expect(sent).toEqual([]);
  });

  it('redrive of an id that is not a number: one issue that says so, nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    for (const id of ['abc', '-1', '1.5', '', -1, 1.5]) {
      const e = (await queue.redrive({ ids: ['7', id as string] }))._unsafeUnwrapErr();
      expect(e.kind).toBe('InvalidOptions');
      const issues = e.kind === 'InvalidOptions' ? e.issues : [];
      expect(issues.map((i) => [i.path, i.message])).toEqual([
        [['ids', 1], 'not a job id (a whole number from 0 to 9223372036854775807)'],
      ]);
    }
    expect(sent).toEqual([]);
  });

  it('redrive: InvalidOptions, nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    const r = await queue.redrive({ ids: ['1', BEYOND_BIGINT] });
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    expect(sent).toEqual([]);
  });
});

describe('one malformed lease in a batch', () => {
  it('completeMany: that item gets InvalidOptions, the others complete', async () => {
    const { queue } = await freshQueue();
    (await queue.enqueueMany(pool, 'email', [{ to: 'a' }, { to: 'b' }, { to: 'c' }]))._unsafeUnwrap();
    const [a, b, c] = (await queue.claim({ batch: 3 }))._unsafeUnwrap();
    const bad = { id: b!.id, leaseToken: 'not-a-uuid' };
    const beyond = { id: BEYOND_BIGINT, leaseToken: c!.leaseToken };
    const r = (await queue.completeMany([a!, bad, beyond, c!]))._unsafeUnwrap();
    expect(r.completed).toEqual([a!.id, c!.id]);
    expect(r.lost).toEqual([]);
    expect(r.invalid.map((i) => [i.id, i.error.kind])).toEqual([
      [b!.id, 'InvalidOptions'],
      [BEYOND_BIGINT, 'InvalidOptions'],
    ]);
    expect((await queue.complete(bad))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    // b is still running under its real lease, which still completes it.
    expect((await queue.complete(b!)).isOk()).toBe(true);
  });

  it('failMany, extendMany and release skip the malformed item and settle the rest', async () => {
    const { queue } = await freshQueue();
    (await queue.enqueueMany(pool, 'email', [{ to: 'a' }, { to: 'b' }]))._unsafeUnwrap();
    const [a, b] = (await queue.claim({ batch: 2 }))._unsafeUnwrap();
    const bad = { id: a!.id, leaseToken: 'zzz' };
    expect((await queue.extendMany([bad, a!, b!]))._unsafeUnwrap().size).toBe(2);
    expect((await queue.fail(bad, 'x'))._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const failed = (
      await queue.failMany([
        { job: bad, error: 'x' },
        { job: a!, error: 'y' },
      ])
    )._unsafeUnwrap();
    expect([...failed.keys()]).toEqual([a!.id]);
    expect((await queue.release([bad, b!]))._unsafeUnwrap()).toEqual([b!.id]);
  });
});

describe('an empty unique key', () => {
  it('enqueue and enqueueMany: InvalidOptions on the key, nothing sent (the table refuses it too)', async () => {
    const { queue, sent } = await freshQueue();
    const one = (await queue.enqueue(pool, 'email', { to: 'a' }, { key: '' }))._unsafeUnwrapErr();
    const many = (
      await queue.enqueueMany(pool, 'email', [{ to: 'a' }, { to: 'b' }], { keys: ['k', ''] })
    )._unsafeUnwrapErr();
    expect(one.kind === 'InvalidOptions' && one.issues.map((i) => i.path)).toEqual([['key']]);
    expect(many.kind === 'InvalidOptions' && many.issues.map((i) => i.path)).toEqual([['keys', 1]]);
    expect(sent).toEqual([]);
  });
});

describe('runAt outside PostgreSQL timestamp range', () => {
  const ancient = new Date(Date.UTC(-5000, 0, 1));

  it('enqueue: InvalidOptions on runAt, nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    const r = await queue.enqueue(pool, 'email', { to: 'a' }, { runAt: ancient });
    const e = r._unsafeUnwrapErr();
    expect(e.kind).toBe('InvalidOptions');
    expect(e.kind === 'InvalidOptions' && e.issues[0]?.path).toEqual(['runAt']);
    expect(sent).toEqual([]);
  });

  it('an invalid Date (new Date(NaN)): InvalidOptions that says "invalid date", nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    const one = (
      await queue.enqueue(pool, 'email', { to: 'a' }, { runAt: new Date(Number.NaN) })
    )._unsafeUnwrapErr();
    const many = (
      await queue.enqueueMany(pool, 'email', [{ to: 'a' }], { runAt: new Date('not a date') })
    )._unsafeUnwrapErr();
    for (const e of [one, many]) {
      expect(e.kind).toBe('InvalidOptions');
      const issues = e.kind === 'InvalidOptions' ? e.issues : [];
      expect(issues.map((i) => [i.path, i.message])).toEqual([[['runAt'], 'invalid date (its time is NaN)']]);
    }
    expect(sent).toEqual([]);
  });

  it('enqueueMany: InvalidOptions on runAt', async () => {
    const { queue } = await freshQueue();
    const r = await queue.enqueueMany(pool, 'email', [{ to: 'a' }], { runAt: ancient });
    expect(r._unsafeUnwrapErr().kind).toBe('InvalidOptions');
  });

  it('the earliest timestamp PostgreSQL stores is accepted', async () => {
    const { queue } = await freshQueue();
    const r = await queue.enqueue(pool, 'email', { to: 'a' }, { runAt: new Date(Date.UTC(-4713, 10, 24)) });
    expect(r.isOk()).toBe(true);
  });
});

describe('a lease shorter than the floor (5 s)', () => {
  // A lease of 0 ms expired the moment its job was claimed: the reaper or another claim took it back and
  // the job ran again while its first run went on (one job ran 3 times, 2 at once).
  const job = { id: '1', leaseToken: '00000000-0000-4000-8000-000000000000' };
  const shortLeases = [0, 1, 150, '300ms', '4999ms', '4.9s'];

  const leaseIssue = (e: unknown) => {
    const error = e as { kind?: string; issues?: { path: unknown[]; message: string }[] };
    expect(error.kind).toBe('InvalidOptions');
    const issue = error.issues?.find((i) => i.path.includes('lease'));
    expect(issue?.message).toMatch(/at least 5 s/);
  };

  it('new Queue: InvalidOptions on lease', () => {
    for (const lease of shortLeases) {
      let thrown: unknown;
      try {
        new Queue({ pool, txManager: new TxManager(pool), tasks, lease });
      } catch (e) {
        thrown = e;
      }
      leaseIssue(thrown);
    }
  });

  it('work(): InvalidOptions on lease, no worker started, nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    for (const lease of shortLeases) {
      let thrown: unknown;
      try {
        queue.work({ email: () => {} }, { lease });
      } catch (e) {
        thrown = e;
      }
      leaseIssue(thrown);
    }
    expect(sent).toEqual([]);
  });

  it('claim, extend, extendMany: InvalidOptions, nothing sent', async () => {
    const { queue, sent } = await freshQueue();
    for (const lease of shortLeases) {
      leaseIssue((await queue.claim({ lease }))._unsafeUnwrapErr());
      leaseIssue((await queue.extend(job, lease))._unsafeUnwrapErr());
      leaseIssue((await queue.extendMany([job], lease))._unsafeUnwrapErr());
    }
    expect(sent).toEqual([]);
  });

  it('the floor itself is accepted', async () => {
    const { queue } = await freshQueue();
    await queue.enqueue(pool, 'email', { to: 'a' });
    const [c] = (await queue.claim({ lease: '5s' }))._unsafeUnwrap();
    expect(c).toBeDefined();
    (await queue.extend(c!, 5000))._unsafeUnwrap();
    (await queue.complete(c!))._unsafeUnwrap();
    expect(new Queue({ pool, txManager: new TxManager(pool), tasks, lease: 5000 }).leaseMs).toBe(5000);
  });
});

describe("a schema the queue's tables must not go into", () => {
  it('public, information_schema, pg_catalog, pg_toast and any pg_ schema: InvalidOptions on schema', () => {
    for (const schema of ['public', 'information_schema', 'pg_catalog', 'pg_toast', 'pg_temp', 'pg_jobs']) {
      let thrown: unknown;
      try {
        new Queue({ pool, txManager: new TxManager(pool), tasks, schema });
      } catch (e) {
        thrown = e;
      }
      const error = thrown as { kind?: string; issues?: { path: unknown[]; message: string }[] };
      expect(error?.kind, schema).toBe('InvalidOptions');
      expect(error.issues?.map((i) => i.path)).toEqual([['schema']]);
      expect(error.issues?.[0]?.message).toMatch(/a schema of its own/);
    }
    // Names that merely contain those words are the queue's own.
    for (const schema of ['public_jobs', 'my_pg_queue', 'jobs']) {
      expect(new Queue({ pool, txManager: new TxManager(pool), tasks, schema }).schema).toBe(schema);
    }
  });
});
