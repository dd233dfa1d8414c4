import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/index.js';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { backendPid, expireLeases, leaks, queueClient, untilBlocked } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
const tm = new TxManager(pool);
const tasks = {
  email: z.object({ to: z.string().email() }),
  resize: z.object({ url: z.string(), width: z.number().int().positive() }),
};
let schemaSeq = 0;

/** A fresh queue schema per test, so tests never see each other's jobs. */
async function freshQueue(extra: { archive?: boolean; maxAttempts?: number } = {}) {
  const queue = new Queue({ pool, txManager: tm, schema: `q_core_${++schemaSeq}`, tasks, ...extra });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

async function row(queue: Queue, id: string) {
  const r = await pool.query(`SELECT * FROM ${queue.schema}.jobs WHERE id = $1`, [id]);
  return r.rows[0] as
    | { state: string; attempts: number; lease_token: string | null; last_error: string | null; run_at: Date }
    | undefined;
}

afterEach(async () => {
  expect(await leaks(pool)).toEqual({ checkedOut: 0, idleInTransaction: 0 });
});

describe('migrate', () => {
  it('applies each migration once, even when many processes start at once', async () => {
    const queues = Array.from(
      { length: 6 },
      () => new Queue({ pool, txManager: tm, schema: 'q_race', tasks }),
    );
    const results = await Promise.all(queues.map((q) => q.migrate()));
    const applied = results.map((r) => r._unsafeUnwrap().applied.length);
    const latest = QUEUE_MIGRATIONS.length;
    expect(applied.filter((n) => n > 0)).toEqual([latest]);
    expect(results.every((r) => r._unsafeUnwrap().version === latest)).toBe(true);
    const again = await queues[0]?.migrate();
    expect(again?._unsafeUnwrap()).toEqual({ applied: [], version: latest });
  });
});

describe('state transitions', () => {
  it('pending → running → done (deleted), attempts counted at claim, lease token per claim', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'email', { to: 'a@example.com' }))._unsafeUnwrap();
    expect(job).toMatchObject({ task: 'email', state: 'pending', created: true, key: null });
    const [claimed] = (await queue.claim({ batch: 5, lease: '30s' }))._unsafeUnwrap();
    expect(claimed).toMatchObject({ id: job.id, attempts: 1, payload: { to: 'a@example.com' } });
    expect(claimed?.leaseToken).toMatch(/^[0-9a-f-]{36}$/);
    expect((await row(queue, job.id))?.state).toBe('running');
    expect((await queue.claim({ batch: 5 }))._unsafeUnwrap()).toEqual([]);
    (await queue.complete(claimed!))._unsafeUnwrap();
    expect(await row(queue, job.id)).toBeUndefined();
    // A second completion of the same claim is stale.
    expect((await queue.complete(claimed!))._unsafeUnwrapErr().kind).toBe('LeaseLost');
  });

  it('done jobs go to the archive when configured; cancelled ones too', async () => {
    const queue = await freshQueue({ archive: true });
    const a = (await queue.enqueue(pool, 'email', { to: 'a@example.com' }))._unsafeUnwrap();
    const b = (await queue.enqueue(pool, 'email', { to: 'b@example.com' }))._unsafeUnwrap();
    const [claimed] = (await queue.claim({ batch: 1 }))._unsafeUnwrap();
    expect(claimed?.id).toBe(a.id);
    (await queue.complete(claimed!))._unsafeUnwrap();
    (await queue.cancel(b.id))._unsafeUnwrap();
    const archived = await pool.query(
      `SELECT id, state, attempts FROM ${queue.schema}.jobs_archive ORDER BY id`,
    );
    expect(archived.rows).toEqual([
      { id: a.id, state: 'done', attempts: 1 },
      { id: b.id, state: 'cancelled', attempts: 0 },
    ]);
    expect((await queue.cancel(b.id))._unsafeUnwrapErr().kind).toBe('NotFound');
  });

  it('running → pending on fail, with capped full-jitter backoff or an explicit retryIn', async () => {
    const queue = await freshQueue();
    const job = (
      await queue.enqueue(
        pool,
        'email',
        { to: 'a@example.com' },
        { backoff: { baseMs: 60_000, capMs: 90_000 } },
      )
    )._unsafeUnwrap();
    const [c1] = (await queue.claim())._unsafeUnwrap();
    const before = Date.now();
    const failed = (await queue.fail(c1!, new Error('smtp 451')))._unsafeUnwrap();
    expect(failed.state).toBe('pending');
    const delay = failed.runAt.getTime() - before;
    expect(delay).toBeGreaterThanOrEqual(-1000);
    expect(delay).toBeLessThanOrEqual(60_000 + 1000); // attempt 1: random in [0, base)
    const r = await row(queue, job.id);
    expect(r).toMatchObject({
      state: 'pending',
      attempts: 1,
      lease_token: null,
      last_error: 'Error: smtp 451',
    });
    // A stale fail changes nothing.
    expect((await queue.fail(c1!, 'again'))._unsafeUnwrapErr().kind).toBe('LeaseLost');
    // Make it runnable now, then fail with an explicit retryIn of 0: claimable at once.
    await pool.query(`UPDATE ${queue.schema}.jobs SET run_at = now() WHERE id = $1`, [job.id]);
    const [c2] = (await queue.claim())._unsafeUnwrap();
    expect(c2?.attempts).toBe(2);
    expect(c2?.lastError).toBe('Error: smtp 451');
    (await queue.fail(c2!, 'busy', { retryIn: 0 }))._unsafeUnwrap();
    const [c3] = (await queue.claim())._unsafeUnwrap();
    expect(c3?.attempts).toBe(3);
    expect(c3?.leaseToken).not.toBe(c2?.leaseToken);
  });

  it('the jobs of one claim share its lease token; a later claim of a job draws a new one, and the old token fences nothing but the jobs still under it', async () => {
    for (const groups of [
      undefined,
      { default: { concurrency: 1 } },
      { default: { rate: { limit: 10, per: '1m' } } },
    ]) {
      // The plain claim, the limited claim's lean path (concurrency only) and its full path (a rate).
      const queue = new Queue({
        pool,
        txManager: tm,
        schema: `q_core_${++schemaSeq}`,
        tasks,
        ...(groups ? { groups } : {}),
      });
      (await queue.migrate())._unsafeUnwrap();
      const ids = (
        await queue.enqueueMany(
          pool,
          'email',
          [{ to: 'a@example.com' }, { to: 'b@example.com' }, { to: 'c@example.com' }],
          {
            groups: ['g1', 'g2', 'g3'],
          },
        )
      )._unsafeUnwrap().ids;
      const first = (await queue.claim({ batch: 3 }))._unsafeUnwrap();
      expect(first.map((j) => j.id).sort()).toEqual([...ids].sort());
      expect(new Set(first.map((j) => j.leaseToken)).size).toBe(1);
      const [a, b, c] = first;
      // a goes back (released) and is claimed again: a new token.
      expect((await queue.release([a!]))._unsafeUnwrap()).toEqual([a!.id]);
      const [again] = (await queue.claim({ batch: 3 }))._unsafeUnwrap();
      expect(again?.id).toBe(a!.id);
      expect(again?.leaseToken).not.toBe(a!.leaseToken);
      // The first claim's token no longer settles a, still settles b and c.
      expect((await queue.complete(a!))._unsafeUnwrapErr().kind).toBe('LeaseLost');
      (await queue.complete(b!))._unsafeUnwrap();
      (await queue.fail(c!, 'boom', { final: true }))._unsafeUnwrap();
      expect((await row(queue, a!.id))?.state).toBe('running');
      (await queue.complete(again!))._unsafeUnwrap();
      expect(await row(queue, a!.id)).toBeUndefined();
      expect((await row(queue, c!.id))?.state).toBe('dead');
    }
  });

  it('running → dead when attempts are used up, or at once with final; redrive → pending', async () => {
    const queue = await freshQueue();
    const a = (
      await queue.enqueue(pool, 'email', { to: 'a@example.com' }, { maxAttempts: 2 })
    )._unsafeUnwrap();
    for (let i = 0; i < 2; i++) {
      const [c] = (await queue.claim({ tasks: ['email'] }))._unsafeUnwrap();
      expect(c?.id).toBe(a.id);
      const f = (await queue.fail(c!, `boom ${i}`, { retryIn: 0 }))._unsafeUnwrap();
      expect(f.state).toBe(i === 0 ? 'pending' : 'dead');
    }
    const b = (
      await queue.enqueue(pool, 'email', { to: 'b@example.com' }, { maxAttempts: 9 })
    )._unsafeUnwrap();
    const [cb] = (await queue.claim())._unsafeUnwrap();
    expect(cb?.id).toBe(b.id);
    expect((await queue.fail(cb!, 'bad input', { final: true }))._unsafeUnwrap().state).toBe('dead');
    expect(await row(queue, a.id)).toMatchObject({ state: 'dead', attempts: 2, last_error: 'boom 1' });
    const stats = (await queue.stats())._unsafeUnwrap();
    expect(stats).toMatchObject({ pending: 0, running: 0, dead: 2, expired: 0 });
    expect((await queue.claim())._unsafeUnwrap()).toEqual([]);
    const redriven = (await queue.redrive({ ids: [a.id] }))._unsafeUnwrap();
    expect(redriven).toEqual([a.id]);
    expect(await row(queue, a.id)).toMatchObject({ state: 'pending', attempts: 0 });
    expect((await queue.redrive({ task: 'email' }))._unsafeUnwrap()).toEqual([b.id]);
    expect((await queue.stats())._unsafeUnwrap()).toMatchObject({ pending: 2, ready: 2, dead: 0 });
  });

  it('extend moves the lease; a stale extend is LeaseLost', async () => {
    const queue = await freshQueue();
    await queue.enqueue(pool, 'email', { to: 'a@example.com' });
    const [c] = (await queue.claim({ lease: '5s' }))._unsafeUnwrap();
    const until = (await queue.extend(c!, '10m'))._unsafeUnwrap();
    expect(until.getTime()).toBeGreaterThan(c!.leaseExpiresAt.getTime() + 60_000);
    expect(
      (
        await queue.extend({ id: c!.id, leaseToken: '00000000-0000-0000-0000-000000000000' })
      )._unsafeUnwrapErr().kind,
    ).toBe('LeaseLost');
    (await queue.complete(c!))._unsafeUnwrap();
  });

  it('LeaseLost on a stale complete after the reaper re-queued the job; nothing changed', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'email', { to: 'a@example.com' }))._unsafeUnwrap();
    // Its worker stalled past the lease: the lease is expired.
    const [stale] = (await queue.claim())._unsafeUnwrap();
    expect(await expireLeases(pool, queue.schema, [job.id])).toBe(1);
    expect((await queue.stats())._unsafeUnwrap().expired).toBe(1);
    const reaped = (await queue.reap())._unsafeUnwrap();
    expect(reaped).toEqual({ requeued: 1, dead: 0 });
    const after = await row(queue, job.id);
    expect(after).toMatchObject({ state: 'pending', attempts: 1, lease_token: null });
    expect(after?.last_error).toMatch(/lease expired/);
    // The old worker wakes up and settles: fenced out.
    expect((await queue.complete(stale!))._unsafeUnwrapErr().kind).toBe('LeaseLost');
    expect((await queue.fail(stale!, 'x'))._unsafeUnwrapErr().kind).toBe('LeaseLost');
    expect((await queue.extend(stale!))._unsafeUnwrapErr().kind).toBe('LeaseLost');
    expect(await row(queue, job.id)).toMatchObject({ state: 'pending', attempts: 1 });
    // The next claim (after the backoff) owns it.
    await pool.query(`UPDATE ${queue.schema}.jobs SET run_at = now() WHERE id = $1`, [job.id]);
    const [fresh] = (await queue.claim())._unsafeUnwrap();
    expect(fresh?.attempts).toBe(2);
    (await queue.complete(fresh!))._unsafeUnwrap();
  });

  it('the reaper makes a job dead when its last attempt expired', async () => {
    const queue = await freshQueue();
    const job = (
      await queue.enqueue(pool, 'email', { to: 'a@example.com' }, { maxAttempts: 1 })
    )._unsafeUnwrap();
    await queue.claim();
    await expireLeases(pool, queue.schema, [job.id]);
    expect((await queue.reap())._unsafeUnwrap()).toEqual({ requeued: 0, dead: 1 });
    expect((await row(queue, job.id))?.state).toBe('dead');
  });

  it('cancelling a running job fences its worker out', async () => {
    const queue = await freshQueue();
    const job = (await queue.enqueue(pool, 'email', { to: 'a@example.com' }))._unsafeUnwrap();
    const [c] = (await queue.claim())._unsafeUnwrap();
    (await queue.cancel(job.id))._unsafeUnwrap();
    expect((await queue.complete(c!))._unsafeUnwrapErr().kind).toBe('LeaseLost');
  });

  it('task names, payloads, keys and groups with separators, quotes and non-ASCII text come back as enqueued, from both claims', async () => {
    const task = 'we;ird, "task" \\ ✓ 😀';
    const payload = { s: 'a;b,c"d\\e\n😀', a: [1, null, { x: ';' }], n: -1.5e-7 };
    for (const limited of [false, true]) {
      const queue = new Queue({
        pool,
        txManager: tm,
        schema: `q_core_${++schemaSeq}`,
        tasks: { [task]: z.object({ s: z.string(), a: z.array(z.unknown()), n: z.number() }) },
        ...(limited ? { groups: { default: { concurrency: 1 } } } : {}),
      });
      (await queue.migrate())._unsafeUnwrap();
      (await queue.enqueue(pool, task, payload, { key: 'k;"1",', group: 'g;😀,"x"' }))._unsafeUnwrap();
      (await queue.enqueue(pool, task, { s: '', a: [], n: 0 }))._unsafeUnwrap();
      const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
      // In enqueue order (a claim returns its jobs in no particular order).
      claimed.sort((a, b) => Number(a.id) - Number(b.id));
      expect(claimed.map((j) => [j.task, j.payload, j.key, j.group])).toEqual([
        [task, payload, 'k;"1",', 'g;😀,"x"'],
        [task, { s: '', a: [], n: 0 }, null, null],
      ]);
      expect((await queue.completeClaimed(claimed))._unsafeUnwrap().completed).toHaveLength(2);
    }
  });

  it("a claimed job's fields are the row's, at the edges of their ranges", async () => {
    const queue = await freshQueue();
    // The earliest instant PostgreSQL stores plus 1 ms, a pre-1970 instant, and one with milliseconds;
    // the extreme priorities and attempt limits; a key and a group with commas in them.
    const cases = [
      { runAt: new Date(Date.UTC(-4713, 10, 24) + 1), priority: -2_147_483_648, maxAttempts: 1 },
      { runAt: new Date(-1_501), priority: 2_147_483_647, maxAttempts: 1_000_000, key: 'a,b', group: 'g,1' },
      { runAt: new Date(Date.now() - 123_457), priority: -1, maxAttempts: 7 },
    ];
    const enqueued: { id: string }[] = [];
    for (const o of cases)
      enqueued.push((await queue.enqueue(pool, 'email', { to: 'a@example.com' }, o))._unsafeUnwrap());
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed).toHaveLength(cases.length);
    const { rows } = await pool.query<{
      id: string;
      lease_token: string;
      lease_ms: number;
      created_ms: number;
    }>(
      `SELECT id::text, lease_token::text, floor(extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_ms,
              floor(extract(epoch FROM created_at) * 1000)::float8 AS created_ms
         FROM ${queue.schema}.jobs`,
    );
    for (const [i, o] of cases.entries()) {
      const job = claimed.find((j) => j.id === enqueued[i]?.id);
      const r = rows.find((x) => x.id === job?.id);
      expect(job).toMatchObject({
        task: 'email',
        payload: { to: 'a@example.com' },
        priority: o.priority,
        attempts: 1,
        maxAttempts: o.maxAttempts,
        key: o.key ?? null,
        group: o.group ?? null,
        lastError: null,
        progress: null,
        leaseToken: r?.lease_token,
      });
      expect(job?.runAt.getTime()).toBe(o.runAt.getTime());
      expect(job?.leaseExpiresAt.getTime()).toBe(r?.lease_ms);
      expect(job?.createdAt.getTime()).toBe(r?.created_ms);
    }
  });

  it('completeClaimed completes the jobs still leased and reports the others lost, each by id', async () => {
    const queue = await freshQueue();
    const ids = (
      await queue.enqueueMany(
        pool,
        'email',
        Array.from({ length: 5 }, (_, i) => ({ to: `u${i}@example.com` })),
      )
    )._unsafeUnwrap().ids;
    const claimed = (await queue.claim({ batch: 5 }))._unsafeUnwrap();
    // The claim's row decoding: ids as text, the payload parsed, numbers as numbers, timestamps as Dates.
    expect(claimed.map((j) => j.id).sort()).toEqual([...ids].sort());
    expect(claimed[0]).toMatchObject({ task: 'email', attempts: 1, maxAttempts: 5, priority: 0, key: null });
    expect(claimed[0]?.payload).toEqual({ to: expect.stringMatching(/@example\.com$/) });
    expect(claimed[0]?.leaseExpiresAt.getTime()).toBeGreaterThan(claimed[0]?.createdAt.getTime() ?? 0);
    // Two of them are no longer this claim's: one cancelled, one under another lease token (as when the reaper
    // re-queued it and another worker claimed it).
    const [a, b, ...rest] = claimed;
    (await queue.cancel(a!.id))._unsafeUnwrap();
    await pool.query(`UPDATE ${queue.schema}.jobs SET lease_token = gen_random_uuid() WHERE id = $1`, [
      b!.id,
    ]);
    const r = (await queue.completeClaimed(claimed))._unsafeUnwrap();
    expect(r.completed.sort()).toEqual(rest.map((j) => j.id).sort());
    expect(r.lost.sort()).toEqual([a!.id, b!.id].sort());
    expect(r.invalid).toEqual([]);
    expect(await row(queue, b!.id)).toMatchObject({ state: 'running' });
    for (const j of rest) expect(await row(queue, j.id)).toBeUndefined();
  });

  it("the claim decodes a job's progress, group and trace context from the server's text", async () => {
    const queue = await freshQueue();
    const [plain, full] = (
      await queue.enqueueMany(pool, 'email', [{ to: 'a@example.com' }, { to: 'b@example.com' }])
    )._unsafeUnwrap().ids;
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await pool.query(
      `UPDATE ${queue.schema}.jobs SET progress = $2::jsonb, group_key = 'g1', trace_context = $3::jsonb WHERE id = $1`,
      [full, JSON.stringify({ done: 3, of: [1, 2] }), JSON.stringify({ traceparent })],
    );
    const claimed = (await queue.claim({ batch: 2 }))._unsafeUnwrap();
    const byId = new Map(claimed.map((j) => [j.id, j]));
    expect(byId.get(plain!)).toMatchObject({ progress: null, group: null, traceContext: null });
    expect(byId.get(full!)).toMatchObject({
      progress: { done: 3, of: [1, 2] },
      group: 'g1',
      traceContext: { traceparent },
    });
  });

  it("a limited claim decodes its jobs and the rate limit's wait row", async () => {
    const queue = new Queue({
      pool,
      txManager: tm,
      schema: `q_core_${++schemaSeq}`,
      tasks,
      taskRates: { email: { limit: 1, per: '1h' } },
    });
    (await queue.migrate())._unsafeUnwrap();
    (
      await queue.enqueueMany(pool, 'email', [{ to: 'a@example.com' }, { to: 'b@example.com' }], {
        group: 'g2',
      })
    )._unsafeUnwrap();
    const first = (await queue.claimBatch({ batch: 2 }))._unsafeUnwrap();
    expect(first.jobs).toHaveLength(1);
    expect(first.jobs[0]).toMatchObject({ task: 'email', group: 'g2', attempts: 1, progress: null });
    expect(first.jobs[0]?.payload).toEqual({ to: expect.stringMatching(/@example\.com$/) });
    expect(first.jobs[0]?.runAt).toBeInstanceOf(Date);
    const second = (await queue.claimBatch({ batch: 2 }))._unsafeUnwrap();
    expect(second.jobs).toEqual([]);
    expect(typeof second.waitMs).toBe('number');
    expect(second.waitMs).toBeGreaterThan(0);
    (await queue.completeClaimed(first.jobs))._unsafeUnwrap();
  });

  it('claims in priority, then run_at, then id order and skips jobs scheduled later', async () => {
    const queue = await freshQueue();
    const late = (
      await queue.enqueue(pool, 'email', { to: 'l@example.com' }, { runAt: new Date(Date.now() + 3_600_000) })
    )._unsafeUnwrap();
    const low = (
      await queue.enqueue(pool, 'email', { to: 'c@example.com' }, { priority: 5 })
    )._unsafeUnwrap();
    const first = (
      await queue.enqueue(pool, 'email', { to: 'a@example.com' }, { priority: -1 })
    )._unsafeUnwrap();
    const mid = (
      await queue.enqueueMany(pool, 'email', [{ to: 'b1@example.com' }, { to: 'b2@example.com' }])
    )._unsafeUnwrap();
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.id)).toEqual([first.id, ...mid.ids, low.id]);
    expect(claimed.map((j) => j.id)).not.toContain(late.id);
    expect((await queue.stats())._unsafeUnwrap()).toMatchObject({ pending: 1, ready: 0, running: 4 });
    (await queue.completeMany(claimed))._unsafeUnwrap();
  });

  it('a claim reads only the jobs it takes, never the whole table, whatever the backlog and its statistics', async () => {
    // With 20,000 pending jobs and fresh statistics, the planner priced a join of the 500 locked ids on
    // the primary key above a hash join over a sequential scan of the table, and the claim's UPDATE read
    // every job. Each claim runs in a new connection: pg_stat_xact_user_tables shows the backend's counts
    // not yet sent to the cumulative statistics, so in a new backend they are the claim's alone.
    const queue = await freshQueue();
    const limited = new Queue({
      pool,
      txManager: tm,
      schema: `q_core_${++schemaSeq}`,
      tasks,
      groups: { default: { concurrency: 1 } },
    });
    (await limited.migrate())._unsafeUnwrap();
    const payloads = Array.from({ length: 20_000 }, (_, i) => ({ to: `u${i}@example.com` }));
    (await queue.enqueueMany(pool, 'email', payloads))._unsafeUnwrap();
    const groups = payloads.map((_, i) => `g${i % 1000}`);
    (await limited.enqueueMany(pool, 'email', payloads, { groups }))._unsafeUnwrap();
    await pool.query(`ANALYZE ${queue.schema}.jobs, ${limited.schema}.jobs`);
    const claims = [
      {
        schema: queue.schema,
        sql: `SELECT count(*)::int AS n FROM ${queue.schema}.claim_jobs(500, 30000, ARRAY['email'])`,
      },
      {
        schema: limited.schema,
        sql: `SELECT count(*)::int AS n FROM ${limited.schema}.claim_jobs_limited(500, 30000, ARRAY['email'],
                '{"default": {"concurrency": 1}, "groups": {}, "tasks": {}}') WHERE (job).id IS NOT NULL`,
      },
    ];
    for (const claim of claims) {
      const client = await queueClient(url);
      try {
        await client.query('BEGIN');
        const claimed = await client.query<{ n: number }>(claim.sql);
        const reads = await client.query<{ seq_scan: string; seq_tup_read: string }>(
          `SELECT seq_scan, seq_tup_read FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`,
          [`${claim.schema}.jobs`],
        );
        await client.query('ROLLBACK');
        expect(claimed.rows[0]?.n).toBe(500);
        expect(reads.rows[0]).toEqual({ seq_scan: '0', seq_tup_read: '0' });
      } finally {
        await client.end();
      }
    }
  });

  it('concurrent claimers never get the same job (SKIP LOCKED)', async () => {
    const queue = await freshQueue();
    (
      await queue.enqueueMany(
        pool,
        'email',
        Array.from({ length: 300 }, (_, i) => ({ to: `u${i}@example.com` })),
      )
    )._unsafeUnwrap();
    const claims = await Promise.all(Array.from({ length: 12 }, () => queue.claim({ batch: 40 })));
    const ids = claims.flatMap((r) => r._unsafeUnwrap().map((j) => j.id));
    expect(ids.length).toBe(300);
    expect(new Set(ids).size).toBe(300);
  });
});

describe('enqueue', () => {
  it('validates the payload: unknown task → UnknownTask, invalid → InvalidOptions, nothing inserted', async () => {
    const queue = await freshQueue();
    const unknown = await queue.enqueue(pool, 'nope' as 'email', { to: 'a@example.com' });
    expect(unknown._unsafeUnwrapErr().kind).toBe('UnknownTask');
    const invalid = await queue.enqueue(pool, 'email', { to: 'not an email' });
    const e = invalid._unsafeUnwrapErr();
    expect(e.kind).toBe('InvalidOptions');
    if (e.kind === 'InvalidOptions') expect(e.issues[0]?.path).toEqual(['payload', 'to']);
    const badOptions = await queue.enqueue(pool, 'email', { to: 'a@example.com' }, { priority: 1.5 });
    expect(badOptions._unsafeUnwrapErr().kind).toBe('InvalidOptions');
    const many = await queue.enqueueMany(pool, 'resize', [
      { url: 'a', width: 10 },
      { url: 'b', width: -1 },
    ]);
    const me = many._unsafeUnwrapErr();
    expect(me.kind).toBe('InvalidOptions');
    if (me.kind === 'InvalidOptions') expect(me.issues[0]?.path).toEqual([1, 'payload', 'width']);
    const count = await pool.query(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs`);
    expect(count.rows[0].n).toBe(0);
  });

  it('a transactional enqueue rolled back with its transaction leaves no job', async () => {
    const queue = await freshQueue();
    await pool.query('CREATE TABLE IF NOT EXISTS q_users (email text PRIMARY KEY)');
    const rolledBack = await tm.do(async (tx) => {
      await tx.query('INSERT INTO q_users VALUES ($1)', ['x@example.com']);
      (await queue.enqueue(tx, 'email', { to: 'x@example.com' }))._unsafeUnwrap();
      await tx.query('INSERT INTO q_users VALUES ($1)', ['x@example.com']); // a real 23505 from the server
    });
    expect(rolledBack._unsafeUnwrapErr().kind).toBe('UniqueViolation');
    const committed = await tm.do(async (tx) => {
      await tx.query('INSERT INTO q_users VALUES ($1)', ['y@example.com']);
      return queue.enqueue(tx, 'email', { to: 'y@example.com' });
    });
    expect(committed._unsafeUnwrap().created).toBe(true);
    const jobs = await pool.query(`SELECT payload->>'to' AS to FROM ${queue.schema}.jobs`);
    expect(jobs.rows).toEqual([{ to: 'y@example.com' }]);
  });

  it('a duplicate key returns the live job instead of inserting (concurrent enqueues)', async () => {
    const queue = await freshQueue();
    const results = await Promise.all(
      Array.from({ length: 16 }, () =>
        queue.enqueue(pool, 'email', { to: 'k@example.com' }, { key: 'welcome:1' }),
      ),
    );
    const jobs = results.map((r) => r._unsafeUnwrap());
    expect(jobs.filter((j) => j.created)).toHaveLength(1);
    expect(new Set(jobs.map((j) => j.id)).size).toBe(1);
    // Still unique while running; a new job may take the key once the old one is done.
    const [c] = (await queue.claim())._unsafeUnwrap();
    const whileRunning = (
      await queue.enqueue(pool, 'email', { to: 'k@example.com' }, { key: 'welcome:1' })
    )._unsafeUnwrap();
    expect(whileRunning).toMatchObject({ id: c?.id, created: false, state: 'running' });
    (await queue.complete(c!))._unsafeUnwrap();
    const next = (
      await queue.enqueue(pool, 'email', { to: 'k@example.com' }, { key: 'welcome:1' })
    )._unsafeUnwrap();
    expect(next.created).toBe(true);
    expect(next.id).not.toBe(c?.id);
    // enqueueMany skips keyed duplicates, against live jobs and within the batch.
    const many = (
      await queue.enqueueMany(
        pool,
        'email',
        [{ to: 'a@example.com' }, { to: 'b@example.com' }, { to: 'c@example.com' }],
        {
          keys: ['welcome:1', 'k2', 'k2'],
        },
      )
    )._unsafeUnwrap();
    expect(many.ids).toHaveLength(1);
    expect(many.skipped).toBe(2);
  });

  it('a duplicate key waiting on an uncommitted insert returns that job once it commits', async () => {
    const queue = await freshQueue();
    const t1 = await queueClient(url);
    const t2 = await queueClient(url);
    try {
      const pid2 = await backendPid(t2);
      await t1.query('BEGIN');
      const first = (await queue.enqueue(t1, 'email', { to: 'k@example.com' }, { key: 'k' }))._unsafeUnwrap();
      const second = queue.enqueue(t2, 'email', { to: 'k@example.com' }, { key: 'k' });
      await untilBlocked(pool, pid2);
      await t1.query('COMMIT');
      expect((await second)._unsafeUnwrap()).toMatchObject({ id: first.id, created: false });
      // If the first transaction rolls back instead, the waiting enqueue inserts its own job.
      await t1.query('BEGIN');
      const other = (
        await queue.enqueue(t1, 'email', { to: 'k@example.com' }, { key: 'k2' })
      )._unsafeUnwrap();
      const third = queue.enqueue(t2, 'email', { to: 'k@example.com' }, { key: 'k2' });
      await untilBlocked(pool, pid2);
      await t1.query('ROLLBACK');
      const inserted = (await third)._unsafeUnwrap();
      expect(inserted.created).toBe(true);
      expect(inserted.id).not.toBe(other.id);
    } finally {
      await t1.end();
      await t2.end();
    }
  });

  it('enqueueMany inserts thousands in one statement and sends ONE notification', async () => {
    const queue = await freshQueue();
    const listener = await queueClient(url);
    let notifications = 0;
    listener.on('notification', (n) => {
      if (n.channel === queue.channel) notifications++;
    });
    try {
      await listener.query(`LISTEN ${queue.channel}`);
      const r = (
        await queue.enqueueMany(
          pool,
          'email',
          Array.from({ length: 5000 }, (_, i) => ({ to: `u${i}@example.com` })),
        )
      )._unsafeUnwrap();
      expect(r.ids).toHaveLength(5000);
      expect(r.skipped).toBe(0);
      await queue.enqueue(
        pool,
        'email',
        { to: 'later@example.com' },
        { runAt: new Date(Date.now() + 60_000) },
      );
      await listener.query('SELECT 1'); // notifications queued before this reply are delivered first
      expect(notifications).toBe(1);
      expect((await queue.stats())._unsafeUnwrap()).toMatchObject({ pending: 5001, ready: 5000 });
    } finally {
      await listener.end();
    }
  });
});
