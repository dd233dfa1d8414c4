import { existsSync } from 'node:fs';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { capabilities } from '../../src/capabilities/capabilities.js';
import { Unsupported } from '../../src/errors/errors.js';
import { JobListener } from '../../src/queue/worker/job-listener.js';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';
import type { StartedStandby } from '../../src/testing/start-standby.js';

// This file starts its own primary (a standby adds a replication slot to it) and a streaming standby
// built from the embedded binaries only.
const primary: StartedPostgres = await startPostgres({ provider: 'embedded' });
const standby: StartedStandby = await primary.startStandby();
afterAll(async () => {
  await standby.stop();
  await primary.stop();
});

async function query<R extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []) {
  const client = new pg.Client(url);
  await client.connect();
  try {
    return await client.query<R>(text, values);
  } finally {
    await client.end();
  }
}

it('streams the primary: a hot standby in recovery, on the same major, that sees committed rows', async () => {
  const [recovering] = (
    await query<{ r: boolean; v: string }>(standby.url, 'SELECT pg_is_in_recovery() AS r')
  ).rows;
  expect(recovering?.r).toBe(true);
  const majors = await Promise.all(
    [primary.url, standby.url].map(
      async (url) =>
        (await query<{ n: string }>(url, "SELECT current_setting('server_version_num') AS n")).rows[0]?.n,
    ),
  );
  expect(majors[1]).toBeDefined();
  expect(majors[1]).toBe(majors[0]);
  await query(primary.url, 'CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL)');
  await query(primary.url, "INSERT INTO notes VALUES (1, 'first')");
  await standby.caughtUp();
  const rows = (await query<{ body: string }>(standby.url, 'SELECT body FROM notes ORDER BY id')).rows;
  expect(rows.map((r) => r.body)).toEqual(['first']);
  // The walsender of this standby, on its slot.
  const senders = await query<{ state: string }>(
    primary.url,
    "SELECT state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
    [standby.slot],
  );
  expect(senders.rowCount).toBe(1);
});

it('a worker LISTEN session on a hot standby gets one Unsupported and stops (the worker polls), no reconnect loop', async () => {
  const errors: unknown[] = [];
  let second: () => void = () => {};
  const again = new Promise<'reconnected'>((resolve) => {
    second = () => resolve('reconnected');
  });
  const listener = new JobListener({
    connection: { connectionString: standby.url },
    channel: 'jobs_jobs',
    onWake: () => {},
    onError: (e) => {
      errors.push(e);
      if (errors.length > 1) second();
    },
  });
  listener.start();
  // Without the refusal check, the listener reconnects (backoff ≤ 100 ms) and fails again first.
  const first = await Promise.race([listener.finished.then(() => 'finished' as const), again]);
  await listener.stop();
  expect(first).toBe('finished');
  expect(errors).toHaveLength(1);
  expect(errors[0]).toBeInstanceOf(Unsupported);
  expect(errors[0]).toMatchObject({ capability: 'listenNotify' });
  expect(listener.listening).toBe(false);
});

it('capabilities() on a hot standby: btree_gist is not "installable" (nothing can be installed there)', async () => {
  const caps = (await capabilities(standby.url))._unsafeUnwrap();
  expect(caps.inRecovery).toBe(true);
  expect(caps.readOnly).toBe(true);
  expect(caps.btreeGist).not.toBe('installable');
  if (caps.btreeGist !== 'installed') {
    expect(caps.btreeGist).toBe('read-only');
    expect(caps.unsupported.btreeGist).toMatch(/hot standby or a read-only session/);
  }
});

it('makes replication lag visible: with replay paused the standby misses a commit, then catches up', async () => {
  await standby.pauseReplay();
  await query(primary.url, "INSERT INTO notes VALUES (2, 'second')");
  const lag = await standby.lag();
  expect(lag.bytes).toBeGreaterThan(0);
  const stale = await query<{ n: number }>(standby.url, 'SELECT count(*)::int AS n FROM notes');
  expect(stale.rows[0]?.n).toBe(1);
  await standby.resumeReplay();
  await standby.caughtUp();
  const fresh = await query<{ n: number }>(standby.url, 'SELECT count(*)::int AS n FROM notes');
  expect(fresh.rows[0]?.n).toBe(2);
});

it('refuses writes with 25006 until promoted, then takes them', async () => {
  await expect(query(standby.url, "INSERT INTO notes VALUES (3, 'third')")).rejects.toMatchObject({
    code: '25006',
  });
  await standby.promote();
  const [row] = (await query<{ r: boolean }>(standby.url, 'SELECT pg_is_in_recovery() AS r')).rows;
  expect(row?.r).toBe(false);
  await query(standby.url, "INSERT INTO notes VALUES (3, 'third')");
  expect((await query<{ n: number }>(standby.url, 'SELECT count(*)::int AS n FROM notes')).rows[0]?.n).toBe(
    3,
  );
  // The old primary no longer sees what the promoted one wrote: two servers now.
  expect((await query<{ n: number }>(primary.url, 'SELECT count(*)::int AS n FROM notes')).rows[0]?.n).toBe(
    2,
  );
});

it('stop() removes its folder and its slot on the primary', async () => {
  const { rows } = await query<{ dir: string }>(
    standby.url,
    "SELECT current_setting('data_directory') AS dir",
  );
  const dir = rows[0]?.dir ?? '';
  expect(existsSync(dir)).toBe(true);
  await standby.stop();
  expect(existsSync(dir)).toBe(false);
  const slots = await query(primary.url, 'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [
    standby.slot,
  ]);
  expect(slots.rowCount).toBe(0);
});
