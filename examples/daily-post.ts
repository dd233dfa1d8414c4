// The daily post, rebuilt on the queue: generated once per day however many replicas run, published by
// any replica that holds the publishing token, and every publication that failed is retried by whichever
// capable replica is up.
//
//   npm run example -- daily-post            (an embedded PostgreSQL is started and removed)
//   DATABASE_URL=postgres://… npm run example -- daily-post
//
// The story it comes from: a blog generator whose cron ran every six hours on every replica; replicas
// coordinated with a session advisory lock keyed by the day. Four incidents in ten days: a replica saw
// the lock held and skipped the retry of failed publications (the holder had died); lock and unlock went
// through different pooled connections, so the lock stayed held; the serverless provider cut an idle
// connection while it held the lock, leaving it orphaned for hours; and a developer's laptop, pointed at
// the production database without the publishing token, won the day's lock, wrote the post and could
// not publish it — a day of silence in the channels. Here:
// - a schedule stored in the database (`schedules` on the Queue) fires each tick exactly once across
//   replicas: its job is enqueued in the transaction that moves the persisted next run forward, under
//   the schedule row's lock. If the replica that fired the last tick stops, any other fires the next;
// - the day's post is written once: `singleRun(name 'daily-post', key = the local date)` inside the
//   job's own transaction (the post, its run record, one publish job per channel and the job's
//   completion commit together). Ticks every six hours, one post per day: later ticks find it done;
// - publishing is one job per channel, `requires: ['publish-token']`: a worker that did not declare that
//   capability (the laptop) never claims one. A publication that fails is retried with backoff by any
//   capable replica; a replica killed mid-publish loses its lease and another one takes the job over;
// - no connection is held across the slow external calls (the writer, the channels), and no session
//   lock exists to leak.
import pg from 'pg';
import { startPostgres } from '../src/testing/start-postgres.js';
import { type DailyPostServices, migrateDailyPost, startDailyPostReplica } from './daily-post/service.js';

// The demo: three replicas (two deployed versions overlapping, and a laptop without the token).
const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const url = process.env.DATABASE_URL ?? server?.url;
const pools = ['prod-old', 'prod-new', 'laptop'].map(
  (name) => new pg.Pool({ connectionString: url, max: 4, application_name: name }),
);
const [oldPool, newPool, laptopPool] = pools as [pg.Pool, pg.Pool, pg.Pool];
await migrateDailyPost(oldPool);
let flaky = 2; // the first two channel calls fail (a 504 from the channel): retried by any capable replica
const services = (who: string): DailyPostServices => ({
  write: async (day) => `Post of ${day}, written on ${who}`,
  publish: async (channel, post) => {
    if (flaky-- > 0) throw new Error(`${channel}: 504 Gateway Timeout`);
    console.log(`  ${who} published post ${post.id} (${post.day}) to ${channel}`);
  },
});
// Compressed time for the demo: a tick every second, a "day" of three ticks.
const fast = { every: '1s', task: 'generate-post', grace: '1m' } as const;
const dayOf = (tick: Date) => `day ${Math.floor(tick.getTime() / 3000)}`;
const work = { scheduleInterval: 100, reapInterval: 500 };
const running = [
  startDailyPostReplica({
    pool: oldPool,
    services: services('prod-old'),
    canPublish: true,
    schedule: { ...fast, payload: { edition: 'v1' } },
    dayOf,
    work,
  }),
  startDailyPostReplica({
    pool: newPool,
    services: services('prod-new'),
    canPublish: true,
    schedule: { ...fast, payload: { edition: 'v2' } },
    dayOf,
    work,
  }),
  startDailyPostReplica({
    pool: laptopPool,
    services: services('laptop'),
    canPublish: false,
    schedule: { ...fast, payload: { edition: 'v1' } },
    dayOf,
    work,
  }),
];
console.log('laptop skips:', running[2]?.worker.skippedTasks);
await new Promise((resolve) => setTimeout(resolve, 7000));
await Promise.all(running.map((r) => r.worker.stop()));
const posts = await oldPool.query(
  'SELECT day, count(*)::int AS posts, min(edition) AS edition FROM blog_posts GROUP BY day ORDER BY day',
);
const published = await oldPool.query('SELECT count(*)::int AS n FROM publications');
console.table(posts.rows);
console.log(`publications: ${published.rows[0].n} (3 per post)`);
await Promise.all(pools.map((p) => p.end()));
await server?.stop();
