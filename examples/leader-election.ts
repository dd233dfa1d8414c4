// Leader election with a session advisory lock — the one place a session lock belongs
// (everything shorter fits in a transaction): a long-running process that holds a dedicated connection for its whole life.
//
//   DATABASE_URL=postgres://… node --experimental-strip-types examples/leader-election.ts   (or tsx)
//   (without DATABASE_URL an embedded PostgreSQL is started and removed)
//
// Three "replicas" try to become the scheduler. The winner works until its lock is LOST (here: we
// terminate its backend, as a network cut or a provider's proxy would); SessionLock notices on its next
// liveness check (or at once on a socket error), aborts `lock.lost`, and the work loop stops. Another
// replica, retrying every second, takes over. Never run a session lock through a transaction-mode pooler
// (PgBouncer pool_mode=transaction, "-pooler" endpoints): SessionLock refuses it.
import pg from 'pg';
import { advisoryKey, SessionLock } from '../src/patterns/advisory/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const url = process.env.DATABASE_URL ?? server?.url ?? '';
const pool = new pg.Pool({ connectionString: url, max: 4 });
pool.on('error', () => {});
const LEADER = advisoryKey('scheduler', 'leader');
const stop = new AbortController();
const terms: string[] = [];

/** The leader's work: runs until the lock is lost (or the process stops). */
async function lead(name: string, lost: AbortSignal): Promise<void> {
  for (let tick = 0; !lost.aborted && !stop.signal.aborted; tick++) {
    console.log(`  ${name} leads (tick ${tick})`);
    await new Promise((r) => setTimeout(r, 200)); // do one unit of idempotent work here
  }
}

async function replica(name: string): Promise<void> {
  while (!stop.signal.aborted) {
    const lock = await SessionLock.acquire(pool, LEADER, {
      checkEvery: '500ms',
      applicationName: `scheduler:${name}`,
      onLost: (e) => console.log(`  ${name} LOST the lock (${e.message})`),
    });
    if (lock.isErr()) {
      if (lock.error.kind !== 'LockBusy') console.log(`  ${name}: ${lock.error.kind}`);
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    terms.push(name);
    console.log(`${name} became the leader (backend pid ${lock.value.pid})`);
    try {
      await lead(name, lock.value.lost);
    } finally {
      await lock.value.release();
    }
  }
}

const replicas = ['a', 'b', 'c'].map((n) => replica(n));
for (let cut = 0; cut < 2; cut++) {
  await new Promise((r) => setTimeout(r, 1500));
  const { rows } = await pool.query<{ pid: number }>(
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 LIMIT 1",
  );
  if (rows[0]) {
    console.log(`-- cutting the leader's connection (pid ${rows[0].pid})`);
    await pool.query('SELECT pg_terminate_backend($1)', [rows[0].pid]);
  }
}
await new Promise((r) => setTimeout(r, 2000));
stop.abort();
await Promise.all(replicas);
console.log(`leaders, in order: ${terms.join(' → ')}`);
await pool.end();
await server?.stop();
