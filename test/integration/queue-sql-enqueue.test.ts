// <schema>.enqueue(task, payload, …): enqueueing from SQL (a trigger, a migration, psql, another
// language) with enqueue()'s rules, and the worker validating such a payload when the job runs.
import { errAsync } from 'neverthrow';
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { DbError } from '../../src/errors/errors.js';
import { type Job, Queue } from '../../src/queue/index.js';
import { uncheckedPayloads } from '../../src/queue/job.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually, storeOf, takeNext } from '../fixtures/queue-helpers.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();
const tm = new TxManager(pool);
const tasks = {
  email: z.object({ to: z.string(), lang: z.string().default('en') }),
  other: z.object({}),
};
let seq = 0;

async function freshQueue(options: { groups?: Record<string, { concurrency: number }> } = {}) {
  const queue = new Queue({ pool, txManager: tm, schema: `q_sqlenq_${++seq}`, tasks, ...options });
  (await queue.migrate())._unsafeUnwrap();
  return queue;
}

async function sqlEnqueue(queue: Queue<typeof tasks>, args: string, values: unknown[]): Promise<string> {
  const r = await pool.query<{ id: string }>(`SELECT ${queue.schema}.enqueue(${args})::text AS id`, values);
  return r.rows[0]?.id as string;
}

describe('<schema>.enqueue from SQL', () => {
  it("enqueues a job a worker runs; the handler gets the payload as the task's schema parses it", async () => {
    const queue = await freshQueue();
    const id = await sqlEnqueue(queue, `'email', '{"to":"a@example.com"}'`, []);
    expect(id).toMatch(/^\d+$/);
    const seen: unknown[] = [];
    const worker = queue.work({ email: async (job) => void seen.push(job.payload) }, { pollInterval: 50 });
    try {
      await eventually(() => worker.counters.completed === 1);
    } finally {
      await worker.stop();
    }
    // The default of the schema is applied, as enqueue() applies it before storing.
    expect(seen).toEqual([{ to: 'a@example.com', lang: 'en' }]);
  });

  it('the handler gets the same payload from SQL as from enqueue(): the JSON of the parsed value', async () => {
    const stampTasks = { stamp: z.object({ at: z.coerce.date() }) };
    const queue = new Queue({ pool, txManager: tm, schema: `q_sqlenq_${++seq}`, tasks: stampTasks });
    (await queue.migrate())._unsafeUnwrap();
    await tm.doOrThrow((tx) => queue.enqueue(tx, 'stamp', { at: '2026-12-04T10:00:00Z' }));
    await pool.query(`SELECT ${queue.schema}.enqueue('stamp', '{"at":"2026-12-04T10:00:00Z"}')`);
    const seen: unknown[] = [];
    const worker = queue.work({ stamp: async (job) => void seen.push(job.payload.at) }, { pollInterval: 50 });
    try {
      await eventually(() => worker.counters.completed === 2);
    } finally {
      await worker.stop();
    }
    // enqueue() stores the parsed Date as JSON, so its handler reads a string: a job from SQL the same.
    expect(seen).toEqual(['2026-12-04T10:00:00.000Z', '2026-12-04T10:00:00.000Z']);
  });

  it('a key: the live job of the task with that key comes back instead of a duplicate, as enqueue() does', async () => {
    const queue = await freshQueue();
    const js = (await queue.enqueue(pool, 'email', { to: 'a' }, { key: 'k' }))._unsafeUnwrap();
    const fromSql = await sqlEnqueue(queue, `'email', '{"to":"b"}', key => 'k'`, []);
    expect(fromSql).toBe(js.id);
    const again = (await queue.enqueue(pool, 'email', { to: 'c' }, { key: 'k' }))._unsafeUnwrap();
    expect(again).toMatchObject({ id: js.id, created: false });
    const [claimed] = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    if (claimed === undefined) throw new Error('nothing claimed');
    (await queue.complete(claimed))._unsafeUnwrap();
    // Done: the key is free again.
    expect(await sqlEnqueue(queue, `'email', '{"to":"d"}', key => 'k'`, [])).not.toBe(js.id);
  });

  it('group, priority and run_at: the group limits it, the lower priority runs first, a later run_at waits', async () => {
    const queue = await freshQueue({ groups: { default: { concurrency: 1 } } });
    await sqlEnqueue(queue, `'email', '{"to":"g1"}', group_key => 'g'`, []);
    await sqlEnqueue(queue, `'email', '{"to":"g2"}', group_key => 'g'`, []);
    await sqlEnqueue(queue, `'email', '{"to":"first"}', priority => -5`, []);
    await sqlEnqueue(queue, `'email', '{"to":"later"}', run_at => now() + interval '1 hour'`, []);
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    // As the task's schema parses them (claim() validates a payload enqueued from SQL, see below).
    expect(claimed.map((j) => j.payload)).toEqual([
      { to: 'first', lang: 'en' },
      { to: 'g1', lang: 'en' },
    ]);
    expect(claimed[1]?.group).toBe('g');
  });

  it('wakes the workers at COMMIT (the NOTIFY of any insert into jobs), not before', async () => {
    const queue = await freshQueue();
    const listener = new pg.Client({ connectionString: url });
    await listener.connect();
    try {
      const heard: string[] = [];
      listener.on('notification', (n) => heard.push(n.channel));
      await listener.query(`LISTEN ${pg.escapeIdentifier(queue.channel)}`);
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query(`SELECT ${queue.schema}.enqueue('email', '{"to":"x"}')`);
        await client.query('SELECT 1');
        expect(heard).toEqual([]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      await eventually(() => heard.length === 1);
      expect(heard).toEqual([queue.channel]);
    } finally {
      await listener.end();
    }
  });

  it('from a trigger: the job commits with the row, or not at all', async () => {
    const queue = await freshQueue();
    const users = `users_${seq}`;
    await pool.query(`CREATE TABLE ${users} (id bigint PRIMARY KEY, email text NOT NULL)`);
    await pool.query(`
      CREATE FUNCTION ${users}_welcome() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM ${queue.schema}.enqueue('email', jsonb_build_object('to', NEW.email), key => 'welcome:' || NEW.id);
        RETURN NEW;
      END $$`);
    await pool.query(
      `CREATE TRIGGER welcome AFTER INSERT ON ${users} FOR EACH ROW EXECUTE FUNCTION ${users}_welcome()`,
    );
    await tm.doOrThrow(async (tx) => {
      await tx.query(`INSERT INTO ${users} VALUES (1, 'one@example.com')`);
    });
    const failed = tm.doOrThrow(async (tx) => {
      await tx.query(`INSERT INTO ${users} VALUES (2, 'two@example.com')`);
      throw new Error('the business transaction fails');
    });
    await expect(failed).rejects.toThrow('the business transaction fails');
    const jobs = await pool.query(`SELECT key, payload FROM ${queue.schema}.jobs ORDER BY id`);
    expect(jobs.rows).toEqual([{ key: 'welcome:1', payload: { to: 'one@example.com' } }]);
  });

  it('a payload its schema refuses fails that job alone (dead, the issue in its error); the others run', async () => {
    const queue = await freshQueue();
    const bad = await sqlEnqueue(queue, `'email', '{"to":42}'`, []);
    await sqlEnqueue(queue, `'email', '{"to":"ok@example.com"}'`, []);
    const ran: unknown[] = [];
    const worker = queue.work({ email: async (job) => void ran.push(job.payload) }, { pollInterval: 50 });
    try {
      await eventually(() => worker.counters.completed === 1 && worker.counters.dead === 1);
    } finally {
      await worker.stop();
    }
    expect(ran).toEqual([{ to: 'ok@example.com', lang: 'en' }]);
    const job = (await queue.job(bad))._unsafeUnwrap();
    expect(job.state).toBe('dead');
    expect(job.attempts).toBe(1);
    expect(job.lastError).toMatch(/payload\.to/);
  });

  it("claim() validates such a payload as work() does: the refused job fails alone with the worker's error, the others come back parsed", async () => {
    const queue = await freshQueue();
    const bad = await sqlEnqueue(queue, `'email', '{"to":42}'`, []);
    const good = await sqlEnqueue(queue, `'email', '{"to":"ok@example.com"}'`, []);
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    // Only the valid job, with the payload its schema parses (the default applied), as a handler gets it.
    expect(claimed.map((j) => [j.id, j.payload])).toEqual([[good, { to: 'ok@example.com', lang: 'en' }]]);
    const refused = (await queue.job(bad))._unsafeUnwrap();
    expect(refused).toMatchObject({ state: 'dead', attempts: 1 });
    expect(refused.lastError).toMatch(/payload\.to/);
    // The valid job is still ours to settle.
    (await queue.complete(claimed[0] as Job))._unsafeUnwrap();
    // The same payload run by a worker: the same error text.
    const other = await freshQueue();
    const viaWorker = await sqlEnqueue(other, `'email', '{"to":42}'`, []);
    const worker = other.work({ email: async () => {} }, { pollInterval: 50 });
    try {
      await eventually(() => worker.counters.dead === 1);
    } finally {
      await worker.stop();
    }
    expect((await other.job(viaWorker))._unsafeUnwrap().lastError).toBe(refused.lastError);
  });

  it('claim() of jobs enqueued from SQL with valid payloads sends no fail statement', async () => {
    const queue = await freshQueue();
    await sqlEnqueue(queue, `'email', '{"to":"a@example.com"}'`, []);
    const fails = vi.spyOn(storeOf(queue), 'failMany');
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.payload)).toEqual([{ to: 'a@example.com', lang: 'en' }]);
    expect(fails).not.toHaveBeenCalled();
  });

  it('claim() whose fail of a refused payload is not written still returns the valid jobs, and logs it', async () => {
    const errors: string[] = [];
    const logger = {
      error: (_: object, msg?: string) => void errors.push(msg ?? ''),
      warn() {},
      info() {},
      debug() {},
    };
    const queue = new Queue({ pool, txManager: tm, schema: `q_sqlenq_${++seq}`, tasks, logger });
    (await queue.migrate())._unsafeUnwrap();
    const bad = await sqlEnqueue(queue, `'email', '{"to":42}'`, []);
    const good = await sqlEnqueue(queue, `'email', '{"to":"ok@example.com"}'`, []);
    // The fail statement fails (the database went away after the claim).
    vi.spyOn(storeOf(queue), 'failMany').mockReturnValue(
      errAsync(new DbError('57P01', 'terminating connection')),
    );
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.id)).toEqual([good]);
    expect(errors).toEqual([expect.stringMatching(/payload their task refuses/)]);
    // The refused job stays leased (it comes back when its lease expires), its attempt counted.
    expect((await queue.job(bad))._unsafeUnwrap()).toMatchObject({ state: 'running', attempts: 1 });
  });

  it('a job enqueued from SQL and taken over by a completion is validated too', async () => {
    const queue = await freshQueue({ groups: { default: { concurrency: 1 } } });
    (await queue.enqueue(pool, 'email', { to: 'first' }, { group: 'g' }))._unsafeUnwrap();
    await sqlEnqueue(queue, `'email', '{"to":7}', group_key => 'g'`, []);
    const [first] = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    if (first === undefined) throw new Error('nothing claimed');
    const r = (await takeNext(queue, [first], { lease: 30_000 }))._unsafeUnwrap();
    expect(r.next.map((j) => j.payload)).toEqual([{ to: 7 }]);
    // Decoded as unchecked, as from a claim: the worker's runner validates it before its handler.
    expect(r.next.map((j) => uncheckedPayloads.has(j))).toEqual([true]);
    // A job enqueued by enqueue() is not.
    expect(uncheckedPayloads.has(first)).toBe(false);
  });

  it('bad arguments are refused by the function (22023), nothing inserted', async () => {
    const queue = await freshQueue();
    for (const args of [`NULL, '{}'`, `'', '{}'`, `'email', NULL`]) {
      await expect(pool.query(`SELECT ${queue.schema}.enqueue(${args})`)).rejects.toMatchObject({
        code: '22023',
      });
    }
    const n = await pool.query(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs`);
    expect(n.rows[0].n).toBe(0);
  });

  it('a non-finite run_at, an empty group_key or an empty key is refused (22023), nothing inserted', async () => {
    // An infinite run_at would sit first in line and make every claim fail (its epoch is no bigint); ''
    // is the schema's own "no group" value, so a job in group '' would hold a slot nothing gives back.
    const queue = await freshQueue();
    for (const args of [
      `'email', '{}', run_at => '-infinity'`,
      `'email', '{}', run_at => 'infinity'`,
      `'email', '{}', group_key => ''`,
      `'email', '{}', key => ''`,
    ]) {
      await expect(pool.query(`SELECT ${queue.schema}.enqueue(${args})`)).rejects.toMatchObject({
        code: '22023',
      });
    }
    const n = await pool.query(`SELECT count(*)::int AS n FROM ${queue.schema}.jobs`);
    expect(n.rows[0].n).toBe(0);
    const g = await pool.query(`SELECT count(*)::int AS n FROM ${queue.schema}.job_groups`);
    expect(g.rows[0].n).toBe(0);
  });

  it('a raw INSERT of a non-finite run_at, an empty group_key or an empty key is refused by the table (23514)', async () => {
    const queue = await freshQueue();
    for (const [values, constraint] of [
      [`'email', '{}', '-infinity', NULL, NULL`, 'jobs_run_at_finite'],
      [`'email', '{}', 'infinity', NULL, NULL`, 'jobs_run_at_finite'],
      [`'email', '{}', now(), '', NULL`, 'jobs_group_key_not_empty'],
      [`'email', '{}', now(), NULL, ''`, 'jobs_key_not_empty'],
    ]) {
      await expect(
        pool.query(
          `INSERT INTO ${queue.schema}.jobs (task, payload, run_at, group_key, key) VALUES (${values})`,
        ),
      ).rejects.toMatchObject({ code: '23514', constraint });
    }
    // Nor can an UPDATE give a job the empty key.
    const keyed = await sqlEnqueue(queue, `'email', '{"to":"b@example.com"}', key => 'k'`, []);
    await expect(
      pool.query(`UPDATE ${queue.schema}.jobs SET key = '' WHERE id = $1`, [keyed]),
    ).rejects.toMatchObject({ code: '23514', constraint: 'jobs_key_not_empty' });
    await pool.query(`DELETE FROM ${queue.schema}.jobs WHERE id = $1`, [keyed]);
    // The claim still works: a good job behind the refused ones runs.
    await sqlEnqueue(queue, `'email', '{"to":"a@example.com"}'`, []);
    const worker = queue.work({ email: async () => {} }, { pollInterval: 50 });
    try {
      await eventually(() => worker.counters.completed === 1);
    } finally {
      await worker.stop();
    }
  });
});
