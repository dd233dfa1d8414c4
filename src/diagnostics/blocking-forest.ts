import type { SessionInfo } from './session.js';

/** A session in the blocking forest with the sessions that wait behind it. */
export interface BlockingNode {
  /** The session at this node. */
  readonly session: SessionInfo;
  /** Sessions whose chosen blocker is this one (each session appears once in the forest). */
  readonly children: readonly BlockingNode[];
  /** Number of sessions below this node (children, their children …). */
  readonly blockedCount: number;
}

/** The forest plus the wait cycles found while building it. */
export interface BlockingForest {
  /** Root blockers first (the ones blocking the most sessions first). */
  readonly roots: readonly BlockingNode[];
  /** Wait cycles (deadlocks not yet broken by the server's deadlock detector), as pid lists. */
  readonly cycles: readonly (readonly number[])[];
}

/**
 * Builds the blocking forest from sessions and their `pg_blocking_pids`. A session with several blockers
 * is placed under one of them, preferring a blocker that is itself waiting (so a reader queued behind a
 * waiting ALTER TABLE appears under the ALTER, which appears under the transaction it waits for); its
 * `session.blockedBy` keeps the full list. Pure: no database.
 *
 * @example
 * const { roots } = buildBlockingForest(report.sessions);
 * roots[0]?.session.pid; // the root blocker
 */
export function buildBlockingForest(sessions: readonly SessionInfo[]): BlockingForest {
  const byPid = new Map(sessions.map((s) => [s.pid, s]));
  const parent = new Map<number, number>();
  for (const s of sessions) {
    const blockers = s.blockedBy.filter((p) => byPid.has(p) && p !== s.pid);
    if (blockers.length === 0) continue;
    const waiting = blockers.find((p) => (byPid.get(p)?.blockedBy.length ?? 0) > 0);
    parent.set(s.pid, waiting ?? (blockers[0] as number));
  }
  // Break cycles: walk each chain; a pid met twice closes a cycle, cut at its smallest pid.
  const cycles: number[][] = [];
  const settled = new Set<number>();
  for (const start of parent.keys()) {
    const path: number[] = [];
    const onPath = new Set<number>();
    let cur: number | undefined = start;
    while (cur !== undefined && !settled.has(cur) && !onPath.has(cur)) {
      path.push(cur);
      onPath.add(cur);
      cur = parent.get(cur);
    }
    if (cur !== undefined && onPath.has(cur)) {
      const cycle = path.slice(path.indexOf(cur)).sort((a, b) => a - b);
      cycles.push(cycle);
      parent.delete(cycle[0] as number);
    }
    for (const p of path) settled.add(p);
  }
  const childrenOf = new Map<number, number[]>();
  for (const [child, par] of parent) {
    const list = childrenOf.get(par) ?? [];
    list.push(child);
    childrenOf.set(par, list);
  }
  const build = (pid: number): BlockingNode => {
    const session = byPid.get(pid) as SessionInfo;
    const children = (childrenOf.get(pid) ?? []).map(build).sort(byWeight);
    const blockedCount = children.reduce((sum, c) => sum + 1 + c.blockedCount, 0);
    return { session, children, blockedCount };
  };
  const roots = sessions
    .filter((s) => !parent.has(s.pid) && childrenOf.has(s.pid))
    .map((s) => build(s.pid))
    .sort(byWeight);
  return { roots, cycles };
}

function byWeight(a: BlockingNode, b: BlockingNode): number {
  return (
    b.blockedCount - a.blockedCount ||
    (b.session.waitAgeMs ?? b.session.xactAgeMs ?? 0) - (a.session.waitAgeMs ?? a.session.xactAgeMs ?? 0) ||
    a.session.pid - b.session.pid
  );
}

/**
 * Every session that waits behind `pid`, directly or through others (following all of
 * `pg_blocking_pids`, not only the forest's edges).
 *
 * @example
 * queuedBehind(report.sessions, alterPid).length; // sessions stuck behind the ALTER
 */
export function queuedBehind(sessions: readonly SessionInfo[], pid: number): number[] {
  const waitersOf = new Map<number, number[]>();
  for (const s of sessions) {
    for (const b of s.blockedBy) {
      const list = waitersOf.get(b) ?? [];
      list.push(s.pid);
      waitersOf.set(b, list);
    }
  }
  const seen = new Set<number>([pid]);
  const stack = [pid];
  const out: number[] = [];
  while (stack.length > 0) {
    const cur = stack.pop() as number;
    for (const w of waitersOf.get(cur) ?? []) {
      if (seen.has(w)) continue;
      seen.add(w);
      out.push(w);
      stack.push(w);
    }
  }
  return out.sort((a, b) => a - b);
}
