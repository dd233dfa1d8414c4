import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Queue } from '../../src/queue/queue.js';
import { startPgBouncer } from '../../src/testing/pgbouncer.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

// Session-scoped features refuse clearly behind a transaction-mode pooler: the queue worker's
// LISTEN would "succeed" on whichever server connection ran it and then never hear a notification, so
// the worker reports TransactionPoolerDetected (phase 'listen') and keeps working by polling.
// (SessionLock's refusal is tested in pgbouncer-advisory.test.ts.)
const { url, pool: direct } = await useTestDatabase({ max: 4 });
const bouncer = await startPgBouncer({ target: url, poolMode: 'transaction', poolSize: 4 });
const pooled = new pg.Pool({ connectionString: bouncer.url, max: 6 });
pooled.on('error', () => {});
afterAll(async () => {
  await pooled.end();
  await bouncer.stop();
});

const tasks = { t: z.object({ n: z.number() }) };
const migrator = new Queue({ pool: direct, txManager: new TxManager(direct), schema: 'refusal_q', tasks });
(await migrator.migrate())._unsafeUnwrap();

/** Runs a worker on `pool` until `count` jobs completed; returns what its hooks saw. */
async function runWorker(pool: pg.Pool, listen: boolean, count: number) {
  const logged: { level: string; msg: string | undefined }[] = [];
  const at = (level: string) => (_obj: object, msg?: string) => void logged.push({ level, msg });
  const logger = { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
  const queue = new Queue({ pool, txManager: new TxManager(pool), schema: 'refusal_q', tasks, logger });
  const errors: { error: unknown; phase: string }[] = [];
  let completed = 0;
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const worker = queue.work(
    {
      t: async () => {
        completed++;
        if (completed === count) finish();
      },
    },
    { listen, pollInterval: 50, hooks: { onError: (error, phase) => errors.push({ error, phase }) } },
  );
  // Until LISTEN is up or refused (bounded: 10 s; a refusal may wait out the probe's notification
  // round trip), so `listening` below is the settled answer.
  for (let i = 0; i < 1000 && listen && !worker.listening && errors.length === 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  for (let n = 0; n < count; n++) (await queue.enqueue(pool, 't', { n }))._unsafeUnwrap();
  await finished;
  const listening = worker.listening;
  await worker.stop();
  return { errors, listening, completed, logged };
}

describe('queue worker LISTEN behind a transaction-mode pooler', () => {
  it('listen: true → TransactionPoolerDetected reported (phase listen), not listening, jobs still done by polling', async () => {
    const r = await runWorker(pooled, true, 5);
    expect(r.completed).toBe(5);
    expect(r.listening).toBe(false);
    expect(r.errors.map((e) => [e.phase, (e.error as { kind?: string }).kind])).toEqual([
      ['listen', 'TransactionPoolerDetected'],
    ]);
    expect(String(r.errors[0]?.error)).toMatch(
      /the queue worker's LISTEN cannot work through a transaction-mode pooler/,
    );
    // Said as what happens next: no reconnect loop, polling.
    expect(r.logged.filter((l) => l.level === 'error').map((l) => l.msg)).toEqual([
      'pg-txkit queue worker: LISTEN refused; the worker polls every 50 ms instead',
    ]);
  });

  it('listen: false → no error: poll-only is the supported mode behind PgBouncer', async () => {
    const r = await runWorker(pooled, false, 5);
    expect(r).toMatchObject({ completed: 5, listening: false, errors: [], logged: [] });
  });

  it('direct connection → listening, no error (the probe has no false positive)', async () => {
    const r = await runWorker(direct, true, 5);
    expect(r).toMatchObject({ completed: 5, listening: true, errors: [] });
  });
});
