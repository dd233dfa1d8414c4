// CPU time of a local PostgreSQL server, from /proc: its postmaster (with its exited children) plus its
// live backends. The one reader of every queue benchmark (bench/queue.ts and bench/queue/*.mjs).
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
