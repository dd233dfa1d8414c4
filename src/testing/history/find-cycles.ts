import { type DependencyGraph, PROCESS, REALTIME, RW, WR, WW } from './dependency-graph.js';

/** A cycle found, as edge ids in order, with the Adya type its edges give it. */
export interface FoundCycle {
  readonly type: 'G0' | 'G1c' | 'G-single' | 'G-nonadjacent' | 'G2-item';
  readonly edges: readonly number[];
}

/**
 * Finds, in each strongly connected component of the dependency graph, one cycle of each type it
 * holds, strongest evidence first (as Elle does):
 * - G0: a component of the ww edges alone;
 * - G1c: a component of ww + wr holding a wr edge (a shortest way back closes the cycle);
 * - G-single: an rw edge `a → b` with a way back from `b` to `a` over ww + wr only;
 * - G-nonadjacent: otherwise, an rw edge `a → b` and a way back on which no two rw edges are
 *   adjacent (nor the last with `a → b`), holding at least one more rw edge: forbidden by snapshot
 *   isolation too, which allows only cycles with two adjacent anti-dependencies;
 * - G2-item: otherwise, any rw edge of the component and the shortest way back over every kind.
 * With `extra` (the real-time bit), those edges join every search. `budget.left` bounds the nodes the
 * G-single searches may visit (a component of thousands of transactions would otherwise cost one
 * search per rw edge); when it runs out the component is reported by its G2-item cycle, which may
 * hold a single rw edge (then typed G-single after all).
 */
export function findCycles(graph: DependencyGraph, extra: number, budget: { left: number }): FoundCycle[] {
  const found: FoundCycle[] = [];
  const n = graph.size;
  const all = WW | WR | RW | extra;
  const inside = new Int32Array(n).fill(-1);
  const sub = new Int32Array(n).fill(-1);
  const components = graph.components(all);
  components.forEach((component, c) => {
    for (const v of component) inside[v] = c;
  });
  const countRw = (edges: readonly number[]) => edges.filter((e) => graph.edge(e).kind === RW).length;

  components.forEach((component, c) => {
    // cycles among ww (G0), then ww + wr (G1c)
    for (const [mask, type, needs] of [
      [WW | extra, 'G0', WW],
      [WW | WR | extra, 'G1c', WR],
    ] as const) {
      const parts = graph.components(mask, inside, c);
      parts.forEach((part, p) => {
        for (const v of part) sub[v] = p;
        let closed: number[] | undefined;
        for (const v of part) {
          graph.forEachOut(v, needs, (id, w) => {
            if (sub[w] !== p) return false;
            const back = graph.path(w, v, mask, sub, p, { left: Number.POSITIVE_INFINITY });
            if (back) closed = [id, ...back];
            return closed !== undefined;
          });
          if (closed) break;
        }
        for (const v of part) sub[v] = -1;
        if (closed) found.push({ type, edges: closed });
      });
    }
    // one rw edge closed by ww + wr (G-single), else any cycle through an rw edge (G2-item)
    let single: number[] | undefined;
    let anyRw: { id: number; from: number; to: number } | undefined;
    for (const v of component) {
      graph.forEachOut(v, RW, (id, w) => {
        if (inside[w] !== c) return false;
        anyRw ??= { id, from: v, to: w };
        if (budget.left <= 0) return true;
        const back = graph.path(w, v, WW | WR | extra, inside, c, budget);
        if (back) single = [id, ...back];
        return single !== undefined;
      });
      if (single || (anyRw && budget.left <= 0)) break;
    }
    if (single) {
      found.push({ type: 'G-single', edges: single });
      return;
    }
    if (!anyRw) return;
    const nonadjacent = nonadjacentCycle(graph, component, inside, c, extra, budget);
    if (nonadjacent) {
      found.push({ type: 'G-nonadjacent', edges: nonadjacent });
      return;
    }
    const back = graph.path(anyRw.to, anyRw.from, all, inside, c, { left: Number.POSITIVE_INFINITY });
    if (!back) return;
    const edges = [anyRw.id, ...back];
    found.push({ type: countRw(edges) === 1 ? 'G-single' : 'G2-item', edges });
  });
  return found;
}

/**
 * A cycle through an rw edge of the component whose rw edges are never adjacent (cyclically) and at
 * least two: for each rw edge `a → b`, a breadth-first search from `b` back to `a` over states
 * (transaction, last edge was rw, an rw edge was taken), never taking rw after rw, arriving at `a` by
 * a non-rw edge with an rw edge taken.
 */
function nonadjacentCycle(
  graph: DependencyGraph,
  component: readonly number[],
  inside: Int32Array,
  c: number,
  extra: number,
  budget: { left: number },
): number[] | undefined {
  const any = WW | WR | RW | extra;
  for (const a of component) {
    let found: number[] | undefined;
    graph.forEachOut(a, RW, (first, b) => {
      if (inside[b] !== c || budget.left <= 0) return budget.left <= 0;
      // state = node * 4 + (lastRw ? 2 : 0) + (hadRw ? 1 : 0); the first step follows an rw edge
      const start = b * 4 + 2;
      const via = new Map<number, [number, number]>([[start, [-1, -1]]]);
      let frontier = [start];
      while (frontier.length > 0 && !found && budget.left > 0) {
        const next: number[] = [];
        for (const state of frontier) {
          budget.left--;
          const v = state >> 2;
          const lastRw = (state & 2) !== 0;
          const hadRw = (state & 1) !== 0;
          graph.forEachOut(v, lastRw ? any & ~RW : any, (id, w) => {
            if (inside[w] !== c) return false;
            const rw = graph.edge(id).kind === RW;
            if (w === a) {
              if (rw || !hadRw) return false;
              const edges = [id];
              let at = state;
              while (at !== start) {
                const [edge, previous] = via.get(at)!;
                edges.push(edge);
                at = previous;
              }
              found = [first, ...edges.reverse()];
              return true;
            }
            const to = w * 4 + (rw ? 2 : 0) + (rw || hadRw ? 1 : 0);
            if (via.has(to)) return false;
            via.set(to, [id, state]);
            next.push(to);
            return false;
          });
          if (found) break;
        }
        frontier = next;
      }
      return found !== undefined;
    });
    if (found) return found;
    if (budget.left <= 0) return undefined;
  }
  return undefined;
}

/** Whether a cycle leans on real-time order. */
export function usesRealtime(graph: DependencyGraph, edges: readonly number[]): boolean {
  return edges.some((e) => graph.edge(e).kind === REALTIME);
}

/** Whether a cycle leans on session (process) order. */
export function usesProcess(graph: DependencyGraph, edges: readonly number[]): boolean {
  return edges.some((e) => graph.edge(e).kind === PROCESS);
}
