// CPU time of a local PostgreSQL server, from /proc: its postmaster (with its exited children) plus its
// live backends, or one backend alone. The one reader of every queue benchmark (bench/queue.ts and
// bench/queue/*.mjs).
import { readdirSync, readFileSync } from 'node:fs';

/** The fields of /proc/<pid>/stat after the command name (state, ppid, …), or undefined if gone. */
function statFields(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * The CPU µs (user + system) one backend has used so far, from /proc (the server must be local); `pid`
 * is its `pg_backend_pid()`. For a benchmark that measures one connection's statements.
 */
export function backendCpuUs(pid) {
  const f = statFields(pid);
  if (f === undefined) throw new Error(`backend ${pid} is not in /proc: the server must run on this machine`);
  return (Number(f[11]) + Number(f[12])) * 1e4; // USER_HZ 100
}

/**
 * A function returning the server's CPU µs so far; `pool` is one of its clients' pool. For a server that
 * is not on this machine (its backend is not in /proc) the function returns undefined.
 */
export async function serverCpuReader(pool) {
  const pid = (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  const postmaster = Number(statFields(pid)?.[1]);
  if (!Number.isInteger(postmaster)) return () => undefined;
  return () => {
    let total = 0;
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      const f = statFields(pid);
      if (f === undefined) continue;
      // After the ')': state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
      const own = Number(f[11]) + Number(f[12]);
      if (Number(pid) === postmaster) total += own + Number(f[13]) + Number(f[14]);
      else if (Number(f[1]) === postmaster) total += own;
    }
    return total * 1e4; // USER_HZ 100
  };
}
