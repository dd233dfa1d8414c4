// The queue's schema history: frozen migrations, each applied once and recorded with its sha-256;
// migrate() refuses a schema whose record differs from what this version ships; a schema at every
// released version migrates to the newest and its jobs keep running.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MigrationChanged } from '../../src/errors/errors.js';
import { Queue } from '../../src/queue/index.js';
import { migrateQueue } from '../../src/queue/schema/migrate-queue.js';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool } = await useTestDatabase();
const tm = new TxManager(pool);
const tasks = { email: z.object({ to: z.string() }) };
let seq = 0;

/**
 * The released versions and the last migration each shipped. A release that adds a migration adds its
 * row here, so that every earlier one is tested as an upgrade path. (0.2.0 is the first release: the
 * schema's development steps before it were squashed into 0001 and are no upgrade path.)
 */
const RELEASED: Readonly<Record<string, number>> = { '0.2.0': 1 };

const queueOn = (schema: string) => new Queue({ pool, txManager: tm, schema, tasks });

/**
 * Enqueues a job on a schema not migrated to the newest version yet, with the schema's own SQL function
 * (migration 0002): this version's enqueue() calls insert_jobs, which a schema gets from migration 0008.
 */
async function enqueueOnOlder(schema: string, to: string, group: string | null = null) {
  await pool.query(`SELECT ${pg.escapeIdentifier(schema)}.enqueue('email', $1::jsonb, group_key => $2)`, [
    JSON.stringify({ to }),
    group,
  ]);
}

async function recorded(schema: string) {
  const r = await pool.query<{ version: number; name: string; checksum: string }>(
    `SELECT version, name, checksum FROM ${pg.escapeIdentifier(schema)}.migrations ORDER BY version`,
  );
  return r.rows;
}

describe('checksums', () => {
  it('each applied migration is recorded with the sha-256 of its file', async () => {
    const schema = `q_mig_${++seq}`;
    (await queueOn(schema).migrate())._unsafeUnwrap();
    expect(await recorded(schema)).toEqual(
      QUEUE_MIGRATIONS.map((m) => ({ version: m.version, name: m.name, checksum: m.checksum })),
    );
  });

  it('a migration edited after it was applied: MigrationChanged says which and both checksums; nothing applied', async () => {
    const schema = `q_mig_${++seq}`;
    (await queueOn(schema).migrate())._unsafeUnwrap();
    const first = QUEUE_MIGRATIONS[0];
    if (first === undefined) throw new Error('no migration');
    const edited = { ...first, sql: `${first.sql}\n-- an edit`, checksum: 'f'.repeat(64) };
    const next = QUEUE_MIGRATIONS.length + 1;
    const extra = {
      version: next,
      name: `${String(next).padStart(4, '0')}_extra.sql`,
      checksum: 'e'.repeat(64),
      sql: 'SELECT 1',
    };
    const r = await migrateQueue(pool, schema, {}, [edited, ...QUEUE_MIGRATIONS.slice(1), extra]);
    const error = r._unsafeUnwrapErr();
    expect(error).toBeInstanceOf(MigrationChanged);
    expect(error).toMatchObject({
      kind: 'MigrationChanged',
      schema,
      version: 1,
      applied: { name: first.name, checksum: first.checksum },
      shipped: { name: first.name, checksum: 'f'.repeat(64) },
    });
    expect(error.message).toContain(first.checksum);
    expect(error.message).toContain('f'.repeat(64));
    // Refused before anything ran: the extra version was not applied.
    expect((await recorded(schema)).map((m) => m.version)).toEqual(QUEUE_MIGRATIONS.map((m) => m.version));
  });

  it('a schema that records a migration this version does not ship (a newer or another build): refused', async () => {
    const schema = `q_mig_${++seq}`;
    (await queueOn(schema).migrate())._unsafeUnwrap();
    await pool.query(
      `INSERT INTO ${pg.escapeIdentifier(schema)}.migrations (version, name, checksum) VALUES (99, '0099_later.sql', 'abc')`,
    );
    const error = (await queueOn(schema).migrate())._unsafeUnwrapErr();
    expect(error).toMatchObject({
      kind: 'MigrationChanged',
      version: 99,
      applied: { name: '0099_later.sql', checksum: 'abc' },
      shipped: null,
    });
  });

  it('a record under another file name for the same version: refused, both names in the message', async () => {
    const schema = `q_mig_${++seq}`;
    (await queueOn(schema).migrate())._unsafeUnwrap();
    await pool.query(`UPDATE ${pg.escapeIdentifier(schema)}.migrations SET name = '001_jobs.sql'`);
    const error = (await queueOn(schema).migrate())._unsafeUnwrapErr();
    expect(error.kind).toBe('MigrationChanged');
    expect(error.message).toContain('001_jobs.sql');
    expect(error.message).toContain('0001_queue.sql');
  });
});

describe('a schema migrated before 0.2.0 (development builds: versions 1 to 11, no checksums)', () => {
  it('is refused with MigrationChanged (version 1 recorded under another name, no checksum); nothing changed', async () => {
    const schema = `q_mig_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    await pool.query(`CREATE SCHEMA ${s}`);
    await pool.query(
      `CREATE TABLE ${s}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    await pool.query(
      `INSERT INTO ${s}.migrations (version, name) VALUES (1, '001_jobs.sql'), (2, '002_claim_function.sql')`,
    );
    const error = (await queueOn(schema).migrate())._unsafeUnwrapErr();
    expect(error).toMatchObject({
      kind: 'MigrationChanged',
      version: 1,
      applied: { name: '001_jobs.sql', checksum: null },
      shipped: { name: '0001_queue.sql' },
    });
    // Rolled back: the table is as it was (no checksum column added).
    const cols = await pool.query(
      `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'migrations' ORDER BY ordinal_position`,
      [schema],
    );
    expect(cols.rows.map((r) => r.column_name)).toEqual(['version', 'name', 'applied_at']);
  });
});

describe('upgrades', () => {
  for (const [release, last] of Object.entries(RELEASED)) {
    it(`a schema at ${release} with pending and running jobs migrates to the newest; its jobs run`, async () => {
      const schema = `q_up_${++seq}`;
      const old = QUEUE_MIGRATIONS.filter((m) => m.version <= last);
      expect((await migrateQueue(pool, schema, {}, old))._unsafeUnwrap().version).toBe(last);
      // Jobs as that version's code left them: pending, and one running under its claim function.
      const s = pg.escapeIdentifier(schema);
      await pool.query(
        `INSERT INTO ${s}.jobs (task, payload) SELECT 'email', jsonb_build_object('to', t) FROM unnest(ARRAY['a', 'b', 'c']) t`,
      );
      const claimedBefore = await pool.query<{ id: string; lease_token: string }>(
        `SELECT id::text, lease_token::text FROM ${s}.claim_jobs(1, 30000, ARRAY['email'])`,
      );
      const running = claimedBefore.rows.map((r) => ({ id: r.id, leaseToken: r.lease_token }))[0];
      const queue = queueOn(schema);
      const newest = QUEUE_MIGRATIONS.length;
      expect((await queue.migrate())._unsafeUnwrap()).toEqual({
        applied: QUEUE_MIGRATIONS.filter((m) => m.version > last).map((m) => m.version),
        version: newest,
      });
      // The job claimed before the upgrade completes under its lease; the others run after it.
      if (running === undefined) throw new Error('nothing claimed');
      (await queue.complete(running))._unsafeUnwrap();
      const rest = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
      expect(rest.map((j) => j.payload)).toEqual([{ to: 'b' }, { to: 'c' }]);
      expect((await queue.completeMany(rest))._unsafeUnwrap().completed).toHaveLength(2);
    });
  }
});

describe('0003 (a finite run_at, a non-empty group key)', () => {
  it('a schema holding a -infinity job fails the migration (CheckViolation), nothing applied; once moved, it migrates', async () => {
    const schema = `q_up_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    const before = QUEUE_MIGRATIONS.filter((m) => m.version <= 2);
    (await migrateQueue(pool, schema, {}, before))._unsafeUnwrap();
    await pool.query(
      `INSERT INTO ${s}.jobs (task, payload, run_at) VALUES ('email', '{"to":"a"}', '-infinity')`,
    );
    const failed = await queueOn(schema).migrate();
    expect(failed._unsafeUnwrapErr()).toMatchObject({
      kind: 'CheckViolation',
      constraint: 'jobs_run_at_finite',
    });
    expect((await recorded(schema)).map((m) => m.version)).toEqual([1, 2]);
    await pool.query(`UPDATE ${s}.jobs SET run_at = now() WHERE NOT isfinite(run_at)`);
    expect((await queueOn(schema).migrate())._unsafeUnwrap()).toEqual({
      applied: QUEUE_MIGRATIONS.filter((m) => m.version >= 3).map((m) => m.version),
      version: QUEUE_MIGRATIONS.length,
    });
  });
});

describe('0004 (a non-empty unique key)', () => {
  it('a schema holding a job keyed by the empty text fails the migration (CheckViolation), nothing applied; once moved, it migrates', async () => {
    const schema = `q_up_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    const before = QUEUE_MIGRATIONS.filter((m) => m.version <= 3);
    (await migrateQueue(pool, schema, {}, before))._unsafeUnwrap();
    // What 0003 let through: a raw INSERT (its enqueue function refuses the empty key).
    await pool.query(`INSERT INTO ${s}.jobs (task, payload, key) VALUES ('email', '{"to":"a"}', '')`);
    const failed = await queueOn(schema).migrate();
    expect(failed._unsafeUnwrapErr()).toMatchObject({
      kind: 'CheckViolation',
      constraint: 'jobs_key_not_empty',
    });
    expect((await recorded(schema)).map((m) => m.version)).toEqual([1, 2, 3]);
    const constraints = await pool.query(
      `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND conname = 'jobs_key_not_empty'`,
      [`${schema}.jobs`],
    );
    expect(constraints.rows).toEqual([]);
    await pool.query(`UPDATE ${s}.jobs SET key = NULL WHERE key = ''`);
    expect((await queueOn(schema).migrate())._unsafeUnwrap()).toEqual({
      applied: QUEUE_MIGRATIONS.filter((m) => m.version >= 4).map((m) => m.version),
      version: QUEUE_MIGRATIONS.length,
    });
    // The job, keyless now, runs.
    const [job] = (await queueOn(schema).claim())._unsafeUnwrap();
    expect(job).toMatchObject({ key: null, payload: { to: 'a' } });
  });
});

describe('0005 (the claim floor)', () => {
  it('a schema of 0004 with pending jobs migrates; the previous claim still runs beside the new one', async () => {
    const schema = `q_up_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    (
      await migrateQueue(
        pool,
        schema,
        {},
        QUEUE_MIGRATIONS.filter((m) => m.version <= 4),
      )
    )._unsafeUnwrap();
    const queue = queueOn(schema);
    for (const to of ['a', 'b', 'c']) await enqueueOnOlder(schema, to);
    expect((await queue.migrate())._unsafeUnwrap()).toEqual({
      applied: QUEUE_MIGRATIONS.filter((m) => m.version >= 5).map((m) => m.version),
      version: QUEUE_MIGRATIONS.length,
    });
    // A worker of the previous version during a rolling deploy: the three-argument claim.
    const old = await pool.query<{ payload: { to: string } }>(
      `SELECT payload FROM ${s}.claim_jobs(1, 30000, ARRAY['email'])`,
    );
    expect(old.rows.map((r) => r.payload.to)).toEqual(['a']);
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.payload)).toEqual([{ to: 'b' }, { to: 'c' }]);
  });
});

describe('0006 (the limited claim and the take-over completion without sequential scans)', () => {
  it('a schema of 0005 migrates while a connection holds their plans; that connection then claims and completes', async () => {
    const schema = `q_up_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    const before = QUEUE_MIGRATIONS.filter((m) => m.version <= 5);
    (await migrateQueue(pool, schema, {}, before))._unsafeUnwrap();
    for (const to of ['a', 'b', 'c']) await enqueueOnOlder(schema, to, 'g');
    const limits = JSON.stringify({ default: { concurrency: 2 } });
    const claim = `SELECT (r.job).id::text AS id, (r.job).lease_token::text AS token, (r.job).payload
                     FROM ${s}.claim_jobs_limited(1, 30000, ARRAY['email'], $1::jsonb) AS r WHERE (r.job).id IS NOT NULL`;
    const takeNext = `SELECT r.done, r.heads FROM ${s}.complete_take_next($1::bigint[], $2::uuid[], 30000, ARRAY['email'],
                        $3::jsonb, 10, false) AS r`;
    // A worker of the previous version: its connection has run (and planned) both functions.
    const client = await pool.connect();
    try {
      const first = await client.query<{ id: string; token: string; payload: { to: string } }>(claim, [
        limits,
      ]);
      expect(first.rows.map((r) => r.payload.to)).toEqual(['a']);
      const settings = async () =>
        (
          await pool.query<{ proname: string; proconfig: string[]; prosrc: string; proacl: unknown }>(
            `SELECT proname, proconfig, prosrc, proacl FROM pg_proc WHERE pronamespace = $1::regnamespace
                AND proname IN ('claim_jobs_limited', 'complete_take_next') ORDER BY proname`,
            [schema],
          )
        ).rows;
      const old = await settings();
      // Up to 0006 only: 0007 re-creates claim_jobs_limited (another body, the same settings).
      const upTo6 = QUEUE_MIGRATIONS.filter((m) => m.version <= 6);
      expect((await migrateQueue(pool, schema, {}, upTo6))._unsafeUnwrap()).toEqual({
        applied: [6],
        version: 6,
      });
      // Only the settings changed (bodies and grants as they were): each gained enable_seqscan=off.
      expect(await settings()).toEqual([
        {
          ...old[0],
          proname: 'claim_jobs_limited',
          proconfig: ['enable_sort=off', 'plan_cache_mode=force_generic_plan', 'enable_seqscan=off'],
        },
        {
          ...old[1],
          proname: 'complete_take_next',
          proconfig: ['plan_cache_mode=force_generic_plan', 'enable_seqscan=off'],
        },
      ]);
      // The same connection completes its job, taking the group's next one over, then claims the last.
      const [job] = first.rows;
      if (job === undefined) throw new Error('nothing claimed');
      const done = await client.query<{ done: string[]; heads: string }>(takeNext, [
        [job.id],
        [job.token],
        limits,
      ]);
      expect(done.rows[0]?.done).toEqual([job.id]);
      expect(done.rows[0]?.heads.split(';')).toHaveLength(1);
      const last = await client.query<{ payload: { to: string } }>(claim, [limits]);
      expect(last.rows.map((r) => r.payload.to)).toEqual(['c']);
    } finally {
      client.release();
    }
  });
});

describe('0007 (the wait hint names every group left out for its rate)', () => {
  it('a schema of 0006 with jobs of a rated group migrates, and its workers claim them on the new claim', async () => {
    const schema = `q_up_${++seq}`;
    (
      await migrateQueue(
        pool,
        schema,
        {},
        QUEUE_MIGRATIONS.filter((m) => m.version <= 6),
      )
    )._unsafeUnwrap();
    const queue = new Queue({
      pool,
      txManager: tm,
      schema,
      tasks,
      groups: { default: { rate: { limit: 1, per: '1s' } } },
    });
    for (const to of ['a', 'b']) await enqueueOnOlder(schema, to, 'g');
    expect((await queue.migrate())._unsafeUnwrap()).toEqual({
      applied: QUEUE_MIGRATIONS.filter((m) => m.version >= 7).map((m) => m.version),
      version: QUEUE_MIGRATIONS.length,
    });
    // One place in the window: the first job, then the second held back by the rate.
    const claimed = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(claimed.map((j) => j.payload)).toEqual([{ to: 'a' }]);
    expect((await queue.claim({ batch: 10 }))._unsafeUnwrap()).toEqual([]);
  });
});

describe('0009 (the completion by the primary key: complete_jobs)', () => {
  it('a job claimed on a schema of 0008 is completed after the migration, by its lease, and only once', async () => {
    const schema = `q_up_${++seq}`;
    (
      await migrateQueue(
        pool,
        schema,
        {},
        QUEUE_MIGRATIONS.filter((m) => m.version <= 8),
      )
    )._unsafeUnwrap();
    const queue = new Queue({ pool, txManager: tm, schema, tasks });
    (await queue.enqueue(pool, 'email', { to: 'a' }))._unsafeUnwrap();
    const [job] = (await queue.claim({ batch: 1 }))._unsafeUnwrap();
    if (job === undefined) throw new Error('no job claimed');
    expect((await queue.migrate())._unsafeUnwrap()).toEqual({
      applied: QUEUE_MIGRATIONS.filter((m) => m.version >= 9).map((m) => m.version),
      version: QUEUE_MIGRATIONS.length,
    });
    expect((await queue.completeMany([job]))._unsafeUnwrap()).toMatchObject({
      completed: [job.id],
      lost: [],
    });
    expect((await queue.completeMany([job]))._unsafeUnwrap()).toMatchObject({
      completed: [],
      lost: [job.id],
    });
  });
});

describe('0010 (the take-over completion reads the freed groups in one scan)', () => {
  it('a schema of 0009 migrates while a connection holds the old plans; that connection then gives a slot back and takes a job over', async () => {
    const schema = `q_up_${++seq}`;
    const s = pg.escapeIdentifier(schema);
    (
      await migrateQueue(
        pool,
        schema,
        {},
        QUEUE_MIGRATIONS.filter((m) => m.version <= 9),
      )
    )._unsafeUnwrap();
    const queue = queueOn(schema);
    for (const to of ['a', 'b', 'c'])
      (await queue.enqueue(pool, 'email', { to }, { group: 'g' }))._unsafeUnwrap();
    const limit = (concurrency: number) => JSON.stringify({ default: { concurrency } });
    const claim = `SELECT (r.job).id::text AS id, (r.job).lease_token::text AS token, (r.job).payload
                     FROM ${s}.claim_jobs_limited($1::int, 30000, ARRAY['email'], $2::jsonb) AS r WHERE (r.job).id IS NOT NULL`;
    const takeNext = `SELECT r.done, r.heads FROM ${s}.complete_take_next($1::bigint[], $2::uuid[], 30000, ARRAY['email'],
                        $3::jsonb, 10, false) AS r`;
    const running = async () =>
      (await pool.query<{ running: number }>(`SELECT running FROM ${s}.job_groups WHERE key = 'g'`)).rows[0]
        ?.running;
    const client = await pool.connect();
    try {
      // A worker of the previous version: its connection has run (and planned) both functions.
      const first = await client.query<{ id: string; token: string; payload: { to: string } }>(claim, [
        2,
        limit(2),
      ]);
      expect(first.rows.map((r) => r.payload.to)).toEqual(['a', 'b']);
      const none = await client.query<{ done: string[] }>(takeNext, [[], [], limit(2)]);
      expect(none.rows[0]?.done).toEqual([]);
      const settings = async () =>
        (
          await pool.query<{ proconfig: string[]; prosrc: string }>(
            `SELECT proconfig, prosrc FROM pg_proc WHERE pronamespace = $1::regnamespace AND proname = 'complete_take_next'`,
            [schema],
          )
        ).rows[0];
      const old = await settings();
      expect(
        (
          await migrateQueue(
            pool,
            schema,
            {},
            QUEUE_MIGRATIONS.filter((m) => m.version <= 10),
          )
        )._unsafeUnwrap(),
      ).toEqual({
        applied: [10],
        version: 10,
      });
      // A new body with the settings it had (plans kept per connection, no sequential scans).
      const now = await settings();
      expect(now?.proconfig).toEqual(['plan_cache_mode=force_generic_plan', 'enable_seqscan=off']);
      expect(now?.prosrc).not.toEqual(old?.prosrc);
      const [a, b] = first.rows;
      if (a === undefined || b === undefined) throw new Error('two jobs expected');
      // The limit lowered to 1 while 2 run: completing 'a' takes nothing over, its slot goes back.
      const gaveBack = await client.query<{ done: string[]; heads: string | null }>(takeNext, [
        [a.id],
        [a.token],
        limit(1),
      ]);
      expect(gaveBack.rows[0]).toEqual({ done: [a.id], heads: null });
      expect(await running()).toBe(1);
      // Within the limit again: completing 'b' takes 'c' over, the group's count unchanged.
      const took = await client.query<{ done: string[]; heads: string }>(takeNext, [
        [b.id],
        [b.token],
        limit(1),
      ]);
      expect(took.rows[0]?.done).toEqual([b.id]);
      expect(took.rows[0]?.heads.split(';')).toHaveLength(1);
      expect(await running()).toBe(1);
      const left = await pool.query<{ payload: { to: string }; state: string }>(
        `SELECT payload, state FROM ${s}.jobs`,
      );
      expect(left.rows).toEqual([{ payload: { to: 'c' }, state: 'running' }]);
    } finally {
      client.release();
    }
  });
});
