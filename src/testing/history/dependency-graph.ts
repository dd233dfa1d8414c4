import type { HistoryKey, HistoryValue } from './history.js';

/**
 * The kinds of dependency between two transactions (Adya's, as Elle infers them), as bits:
 * - `ww`: the second overwrote (or appended after) a version the first wrote;
 * - `wr`: the second read a version the first wrote;
 * - `rw`: the second wrote the version that follows the one the first read (an anti-dependency);
 * - `realtime`: the first finished before the second began;
 * - `process`: the first ran before the second on the same client (session order).
 */
export const WW = 1;
export const WR = 2;
export const RW = 4;
export const REALTIME = 8;
export const PROCESS = 16;

/** The name of a dependency kind. */
export type DependencyKind = 'ww' | 'wr' | 'rw' | 'realtime' | 'process';

const KIND_NAMES: Readonly<Record<number, DependencyKind>> = {
  [WW]: 'ww',
  [WR]: 'wr',
  [RW]: 'rw',
  [REALTIME]: 'realtime',
  [PROCESS]: 'process',
};

/** The name of one kind bit. */
export function kindName(bit: number): DependencyKind {
  const name = KIND_NAMES[bit];
  if (!name) throw new RangeError(`not a dependency kind: ${bit}`);
  return name;
}

/** Why an edge exists: the key and the versions involved (`value` undefined: the key's initial state). */
export interface EdgeWhy {
  readonly key?: HistoryKey;
  /** The version the first transaction wrote or read. */
  readonly value?: HistoryValue | readonly HistoryValue[] | null;
  /** The version the second transaction wrote or read. */
  readonly next?: HistoryValue | readonly HistoryValue[] | null;
}

/**
 * A directed multigraph over transactions (numbered 0…n-1), built once: edges are added, then
 * {@link DependencyGraph.freeze} lays them out in compressed rows for the searches. Edges carry their
 * kind and why; a self edge (a transaction depending on itself) is dropped.
 */
export class DependencyGraph {
  readonly size: number;
  #from: number[] = [];
  #to: number[] = [];
  #kind: number[] = [];
  #why: EdgeWhy[] = [];
  #offsets: Int32Array | undefined;
  #targets: Int32Array | undefined;
  #ids: Int32Array | undefined;

  constructor(size: number) {
    this.size = size;
  }

  /** Adds `from → to` of `kind`. */
  add(from: number, to: number, kind: number, why: EdgeWhy): void {
    if (from === to) return;
    if (this.#offsets) throw new Error('DependencyGraph: add after freeze');
    this.#from.push(from);
    this.#to.push(to);
    this.#kind.push(kind);
    this.#why.push(why);
  }

  /** How many edges. */
  get edgeCount(): number {
    return this.#from.length;
  }

  /** Lays the edges out for traversal (counting sort by source). */
  freeze(): void {
    const n = this.size;
    const m = this.#from.length;
    const offsets = new Int32Array(n + 1);
    for (let e = 0; e < m; e++) offsets[this.#from[e]! + 1]!++;
    for (let v = 0; v < n; v++) offsets[v + 1]! += offsets[v]!;
    const fill = offsets.slice(0, n);
    const targets = new Int32Array(m);
    const ids = new Int32Array(m);
    for (let e = 0; e < m; e++) {
      const slot = fill[this.#from[e]!]!++;
      targets[slot] = this.#to[e]!;
      ids[slot] = e;
    }
    this.#offsets = offsets;
    this.#targets = targets;
    this.#ids = ids;
  }

  #layout(): { offsets: Int32Array; targets: Int32Array; ids: Int32Array } {
    if (!this.#offsets || !this.#targets || !this.#ids) this.freeze();
    return { offsets: this.#offsets!, targets: this.#targets!, ids: this.#ids! };
  }

  /** The edge's endpoints, kind bit and why. */
  edge(id: number): { from: number; to: number; kind: number; why: EdgeWhy } {
    return { from: this.#from[id]!, to: this.#to[id]!, kind: this.#kind[id]!, why: this.#why[id]! };
  }

  /**
   * Strongly connected components (Tarjan, iterative) of the subgraph of edges whose kind is in
   * `mask`, among the nodes where `inside[v] === scope` (every node when `inside` is undefined).
   * Returns only components of two or more transactions: each holds a cycle.
   */
  components(mask: number, inside?: Int32Array, scope = 0): number[][] {
    const { offsets, targets, ids } = this.#layout();
    const kind = this.#kind;
    const n = this.size;
    const index = new Int32Array(n).fill(-1);
    const low = new Int32Array(n);
    const onStack = new Uint8Array(n);
    const stack: number[] = [];
    const callNode: number[] = [];
    const callEdge: number[] = [];
    const found: number[][] = [];
    let counter = 0;
    const usable = (v: number) => inside === undefined || inside[v] === scope;
    for (let root = 0; root < n; root++) {
      if (index[root] !== -1 || !usable(root)) continue;
      callNode.push(root);
      callEdge.push(offsets[root]!);
      index[root] = low[root] = counter++;
      stack.push(root);
      onStack[root] = 1;
      while (callNode.length > 0) {
        const v = callNode[callNode.length - 1]!;
        let e = callEdge[callEdge.length - 1]!;
        const end = offsets[v + 1]!;
        let descended = false;
        while (e < end) {
          const w = targets[e]!;
          const k = kind[ids[e]!]!;
          e++;
          if ((k & mask) === 0 || !usable(w)) continue;
          if (index[w] === -1) {
            callEdge[callEdge.length - 1] = e;
            index[w] = low[w] = counter++;
            stack.push(w);
            onStack[w] = 1;
            callNode.push(w);
            callEdge.push(offsets[w]!);
            descended = true;
            break;
          }
          if (onStack[w] && index[w]! < low[v]!) low[v] = index[w]!;
        }
        if (descended) continue;
        callNode.pop();
        callEdge.pop();
        if (callNode.length > 0) {
          const parent = callNode[callNode.length - 1]!;
          if (low[v]! < low[parent]!) low[parent] = low[v]!;
        }
        if (low[v] === index[v]) {
          const component: number[] = [];
          let w: number;
          do {
            w = stack.pop()!;
            onStack[w] = 0;
            component.push(w);
          } while (w !== v);
          if (component.length > 1) found.push(component);
        }
      }
    }
    return found;
  }

  /** Calls `visit(edgeId, to)` for each edge out of `v` whose kind is in `mask`; stops when it returns true. */
  forEachOut(v: number, mask: number, visit: (edgeId: number, to: number) => boolean | undefined): void {
    const { offsets, targets, ids } = this.#layout();
    for (let e = offsets[v]!; e < offsets[v + 1]!; e++) {
      const id = ids[e]!;
      if ((this.#kind[id]! & mask) !== 0 && visit(id, targets[e]!)) return;
    }
  }

  /**
   * The shortest path (edge ids) from `source` to `target` over edges in `mask`, staying among nodes
   * where `inside[v] === scope`; undefined when there is none or `budget.left` nodes were visited.
   */
  path(
    source: number,
    target: number,
    mask: number,
    inside: Int32Array,
    scope: number,
    budget: { left: number },
  ): number[] | undefined {
    if (source === target) return [];
    const via = new Map<number, number>();
    via.set(source, -1);
    let frontier = [source];
    while (frontier.length > 0 && budget.left > 0) {
      const next: number[] = [];
      for (const v of frontier) {
        budget.left--;
        let done = false;
        this.forEachOut(v, mask, (id, w) => {
          if (inside[w] !== scope || via.has(w)) return false;
          via.set(w, id);
          if (w === target) {
            done = true;
            return true;
          }
          next.push(w);
          return false;
        });
        if (done) {
          const edges: number[] = [];
          let at = target;
          while (at !== source) {
            const id = via.get(at)!;
            edges.push(id);
            at = this.#from[id]!;
          }
          return edges.reverse();
        }
      }
      frontier = next;
    }
    return undefined;
  }
}
