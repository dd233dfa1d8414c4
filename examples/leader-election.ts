// Leader election with a session advisory lock — the one place a session lock belongs: a long-running
// process that holds a dedicated connection for its whole life (everything shorter belongs in a
// transaction-scoped lock).
//
//   DATABASE_URL=postgres://… node --experimental-strip-types examples/leader-election.ts   (or tsx)
//   (without DATABASE_URL an embedded PostgreSQL is started and removed)
//
// Three "replicas" want to be the scheduler. Each waits for the lock IN the server (`wait: 'block'`):
// the followers queue behind the leader in PostgreSQL's lock queue. The leader works until its lock is
// LOST (here: we terminate its backend, as a network cut or a provider's proxy would); SessionLock
// notices on its next liveness check (or at once on a socket error), aborts `lock.lost`, and the work
// loop stops. PostgreSQL hands the lock to the replica that has waited longest — another replica — and
// the old leader queues up again behind the others. Never run a session lock through a
// transaction-mode pooler (PgBouncer pool_mode=transaction, "-pooler" endpoints): SessionLock refuses it.
import pg from 'pg';
import { advisoryKey, listAdvisoryLocks, SessionLock } from '../src/advisory/index.js';
import { startPostgres } from '../src/testing/start-postgres.js';

const server = process.env.DATABASE_URL ? undefined : await startPostgres();
const url = process.env.DATABASE_URL ?? server?.url ?? '';
const pool = new pg.Pool({ connectionString: url, max: 4 });
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
    // Waits in the server's lock queue until this replica is the leader (or the process stops).
    const lock = await SessionLock.acquire(pool, LEADER, {
      wait: 'block',
      signal: stop.signal,
      checkEvery: '500ms',
      applicationName: `scheduler:${name}`,
      onLost: (e) => console.log(`  ${name} LOST the lock (${e.message})`),
    });
    if (lock.isErr()) {
      if (!stop.signal.aborted) console.log(`  ${name}: ${lock.error.kind}, trying again`);
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

/** The backend holding the leader lock in this database (read from pg_locks; takes no lock). */
async function leaderPid(): Promise<number | undefined> {
  const locks = await listAdvisoryLocks(pool);
  if (locks.isErr()) throw locks.error;
  return locks.value.find((l) => l.granted && l.key === LEADER)?.pid;
}

/** Waits (polling pg_locks) until a replica other than the cut one leads. */
async function nextLeader(previous: number | undefined): Promise<number | undefined> {
  for (let i = 0; i < 200; i++) {
    const pid = await leaderPid();
    if (pid !== undefined && pid !== previous) return pid;
    await new Promise((r) => setTimeout(r, 50));
  }
  return undefined;
}

const replicas = ['a', 'b', 'c'].map((n) => replica(n));
let pid = await nextLeader(undefined);
for (let cut = 0; cut < 2 && pid !== undefined; cut++) {
  await new Promise((r) => setTimeout(r, 1000)); // let it lead for a while
  console.log(`-- cutting the leader's connection (pid ${pid})`);
  await pool.query('SELECT pg_terminate_backend($1)', [pid]);
  pid = await nextLeader(pid);
}
await new Promise((r) => setTimeout(r, 1000));
stop.abort();
await Promise.all(replicas);
console.log(`leaders, in order: ${terms.join(' → ')}`);
await pool.end();
await server?.stop();
