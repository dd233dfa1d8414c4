// Where one enqueue's server CPU goes (the whole server's, from /proc, a LISTEN session connected as a
// worker's is), one job per statement in ONE connection:
// - the insert of migration 0001 as enqueue() sent it before migration 0008: one unnamed statement of
//   two data-modifying CTEs (the groups' rows, the jobs with ON CONFLICT) and the keyed read, parsed and
//   planned at every call; the same statement prepared once (the price of parsing and planning it);
// - enqueue() now: a call of insert_jobs (migration 0008), without a key (the call alone) and through
//   one statement of the call in a CTE and the keyed read (a keyed enqueue's first design) with a NULL
//   key; the call with a key not held (a keyed enqueue: the read is sent only when it is); the call with the
//   jobs_notify trigger disabled (the NOTIFY's price);
// - graphile-worker's add_job().
// Interleaved rounds, median (min–max).
// Run: npm run build && node bench/queue/enqueue-variants.mjs  (PGTXKIT_ENQ_ROUNDS, PGTXKIT_ENQ_OPS)
import { loadavg } from 'node:os';
import { makeWorkerUtils } from 'graphile-worker';
import pg from 'pg';
import { insertJobsValues, insertStatements } from '../../dist/queue/store/insert-jobs.js';
import { createTestDatabase, startPostgres } from '../../dist/testing/index.js';
import { filledQueue } from './filled-queue.mjs';
import { serverCpuReader } from './server-cpu.mjs';
import { span } from './stats.mjs';

const ROUNDS = Number(process.env.PGTXKIT_ENQ_ROUNDS ?? 3);
const OPS = Number(process.env.PGTXKIT_ENQ_OPS ?? 3000);

const server = await startPostgres();
const db = await createTestDatabase(server.url, { prefix: 'enq' });
const pool = new pg.Pool({ connectionString: db.url, max: 3 });
const load0 = loadavg()[0];
const results = new Map();
const serverCpu = await serverCpuReader(pool);

/** The enqueue statement before migration 0008 (insert-jobs.ts of 0.2), for schema q. */
const BEFORE = `
      WITH grp AS (
        INSERT INTO "q".job_groups (key)
        SELECT DISTINCT g FROM unnest($9::text[]) AS g WHERE g IS NOT NULL ORDER BY g
        ON CONFLICT (key) DO NOTHING
      ),
      ins AS (
        INSERT INTO "q".jobs AS j (task, payload, priority, run_at, max_attempts, backoff_base_ms,
                                          backoff_cap_ms, key, group_key, trace_context)
        SELECT $1, t.payload, $3, coalesce(t.run_at, $4::timestamptz, now()), $5, $6, $7, t.key, t.group_key,
               $10::jsonb
          FROM unnest($2::jsonb[], $8::text[], $9::text[], $11::timestamptz[])
               WITH ORDINALITY AS t(payload, key, group_key, run_at, n)
         ORDER BY t.n
        ON CONFLICT (task, key) WHERE key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
        RETURNING j.id, j.task, j.state, j.run_at, j.key, j.group_key
      )
      SELECT id, task, state, run_at, key, group_key, true AS created FROM ins
      UNION ALL
      SELECT id, task, state, run_at, key, group_key, false AS created FROM "q".jobs
       WHERE ($8::text[])[1] IS NOT NULL AND task = $1 AND key = ($8::text[])[1] AND state IN ('pending', 'running')
         AND NOT EXISTS (SELECT 1 FROM ins)`;
const now = insertStatements('q');
/** The call and the keyed read in one statement. */
const CALL_AND_READ = `
      WITH ins AS (SELECT * FROM ${now.enqueue.slice(now.enqueue.indexOf('"q".insert_jobs'))})
      SELECT inserted_id AS id, inserted_task AS task, inserted_state AS state, inserted_run_at AS run_at,
             inserted_key AS key, inserted_group_key AS group_key, true AS created FROM ins
      UNION ALL
      SELECT id, task, state, run_at, key, group_key, false AS created FROM "q".jobs
       WHERE ($8::text[])[1] IS NOT NULL AND task = $1 AND key = ($8::text[])[1] AND state IN ('pending', 'running')
         AND NOT EXISTS (SELECT 1 FROM ins)`;
let keySeq = 0;

const values = insertJobsValues({
  task: 'noop',
  payloads: ['{}'],
  priority: 0,
  runAt: null,
  maxAttempts: 5,
  backoff: { baseMs: 1000, capMs: 3_600_000 },
  keys: [null],
  groups: [null],
  traceContext: null,
});

const variants = [
  ['before 0008: the CTE statement, unnamed (as enqueue() sent it)', (c) => c.query(BEFORE, values)],
  [
    'before 0008: the CTE statement, named (prepared once)',
    (c) => c.query({ name: 'enq_before', text: BEFORE, values }),
  ],
  ['enqueue() now, no key: the insert_jobs call', (c) => c.query(now.enqueue, values)],
  ['the call and the keyed read in one statement, key NULL', (c) => c.query(CALL_AND_READ, values)],
  [
    'enqueue() now, a key not held: the insert_jobs call',
    (c) => c.query(now.enqueue, values.with(7, [`k${++keySeq}`])),
  ],
  ['enqueue() now, no key, jobs_notify disabled', (c) => c.query(now.enqueue, values), true],
  [
    'enqueue() now, no key, jobs_notify without its transition table (NOTIFY at every insert)',
    (c) => c.query(now.enqueue, values),
    false,
    `DROP TRIGGER jobs_notify ON q.jobs;
     CREATE FUNCTION q.notify_plain() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN PERFORM pg_notify('q_jobs', ''); RETURN NULL; END $f$;
     CREATE TRIGGER jobs_notify AFTER INSERT ON q.jobs FOR EACH STATEMENT EXECUTE FUNCTION q.notify_plain();`,
  ],
];

async function txkitStep([name, run, noTrigger, sql]) {
  await filledQueue(pool, { jobs: 0, sql });
  const listener = await pool.connect();
  const client = await pool.connect();
  try {
    if (noTrigger) await client.query('ALTER TABLE q.jobs DISABLE TRIGGER jobs_notify');
    let heard = 0;
    listener.on('notification', () => heard++);
    await listener.query('LISTEN q_jobs');
    for (let i = 0; i < 50; i++) await run(client); // warm: catalog caches, the function's plan
    await listener.query('SELECT 1');
    const before = serverCpu();
    for (let i = 0; i < OPS; i++) await run(client);
    await listener.query('SELECT 1');
    const us = (serverCpu() - before) / OPS;
    if (!noTrigger && heard < OPS) throw new Error(`${name}: ${heard} notifications for ${OPS} jobs`);
    results.set(name, [...(results.get(name) ?? []), us]);
  } finally {
    await listener.query('UNLISTEN *');
    listener.removeAllListeners('notification');
    listener.release(true);
    client.release(true);
  }
}

const utils = await makeWorkerUtils({ connectionString: db.url });
await utils.migrate();
await utils.release();
async function graphileStep() {
  const name = 'graphile-worker add_job() (unnamed), with its NOTIFY';
  const listener = await pool.connect();
  const client = await pool.connect();
  try {
    await client.query('DELETE FROM graphile_worker._private_jobs');
    await listener.query('LISTEN "jobs:insert"');
    const run = () =>
      client.query('SELECT * FROM graphile_worker.add_job($1::text, $2::json)', ['noop', '{}']);
    for (let i = 0; i < 50; i++) await run();
    const before = serverCpu();
    for (let i = 0; i < OPS; i++) await run();
    await listener.query('SELECT 1');
    results.set(name, [...(results.get(name) ?? []), (serverCpu() - before) / OPS]);
  } finally {
    await listener.query('UNLISTEN *');
    listener.release(true);
    client.release(true);
  }
}

const steps = [...variants.map((v) => () => txkitStep(v)), graphileStep];
for (let r = 0; r < ROUNDS; r++) {
  for (let i = 0; i < steps.length; i++) await steps[(i + r) % steps.length]();
  process.stderr.write(`round ${r + 1}/${ROUNDS}\n`);
}
console.log('| enqueue of one job per statement | whole server CPU µs/job: median (min–max) |');
console.log('|---|---:|');
for (const [name, xs] of results) console.log(`| ${name} | ${span(xs)} |`);
console.log(
  `\n${OPS} jobs per step, one connection, ${ROUNDS} interleaved rounds; load average ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
);
await pool.end();
await db.drop();
await server.stop();
