/**
 * Named pause points for forcing an interleaving inside code under test, without sleeps.
 *
 * The code under test awaits `g.at(name)`; the test awaits `g.reached(name)` (someone is waiting
 * there), does whatever must happen "in the middle", then releases everybody with `g.open(name)`.
 * An opened gate stays open: later arrivals pass at once, until `g.close(name)` shuts it again.
 */
export interface Gate {
  /**
   * Pause point for the code under test: resolves once the gate `name` is open (at once if it is
   * already open). Counts as an arrival either way. Rejects with `signal.reason` when the signal
   * aborts first.
   */
  at(name: string, signal?: AbortSignal): Promise<void>;
  /** Opens the gate `name`: every waiter is released, and later arrivals pass without waiting. */
  open(name: string): void;
  /** Closes the gate `name` again: later arrivals wait for the next `open`. */
  close(name: string): void;
  /**
   * Resolves once `count` arrivals (default 1) have happened at `name` in total, counting
   * arrivals before the call. Use it to know the code under test is paused there.
   */
  reached(name: string, count?: number): Promise<void>;
  /** How many times `at(name)` was called so far. */
  arrivals(name: string): number;
  /** How many callers are waiting at `name` right now. */
  waiting(name: string): number;
}

interface GateState {
  opened: boolean;
  arrivals: number;
  readonly waiters: Set<() => void>;
  readonly watchers: { readonly count: number; readonly resolve: () => void }[];
}

/**
 * Creates a set of named gates. Each `gate()` call is independent (no shared state between tests).
 *
 * @example
 * const g = gate();
 * const transfer = tm.doOrThrow(async (tx) => {
 *   const { rows } = await tx.query('SELECT balance FROM accounts WHERE id = 1');
 *   await g.at('after-read'); // paused here until the test opens the gate
 *   await tx.query('UPDATE accounts SET balance = $1 WHERE id = 1', [rows[0].balance - 10]);
 * });
 * await g.reached('after-read'); // the transaction has read the balance
 * await pool.query('UPDATE accounts SET balance = 0 WHERE id = 1'); // the concurrent write
 * g.open('after-read');
 * await transfer;
 */
export function gate(): Gate {
  const states = new Map<string, GateState>();
  const state = (name: string): GateState => {
    let s = states.get(name);
    if (!s) {
      s = { opened: false, arrivals: 0, waiters: new Set(), watchers: [] };
      states.set(name, s);
    }
    return s;
  };
  const notifyWatchers = (s: GateState): void => {
    for (let i = s.watchers.length - 1; i >= 0; i--) {
      const w = s.watchers[i];
      if (w && w.count <= s.arrivals) {
        s.watchers.splice(i, 1);
        w.resolve();
      }
    }
  };

  return {
    at(name, signal) {
      const s = state(name);
      if (signal?.aborted) return Promise.reject(signal.reason);
      s.arrivals++;
      notifyWatchers(s);
      if (s.opened) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const onAbort = (): void => {
          s.waiters.delete(release);
          reject(signal?.reason);
        };
        const release = (): void => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        s.waiters.add(release);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    },
    open(name) {
      const s = state(name);
      s.opened = true;
      const waiters = [...s.waiters];
      s.waiters.clear();
      for (const release of waiters) release();
    },
    close(name) {
      state(name).opened = false;
    },
    reached(name, count = 1) {
      if (!Number.isInteger(count) || count < 1) {
        throw new RangeError(`gate.reached: count must be a positive integer, got ${count}`);
      }
      const s = state(name);
      if (s.arrivals >= count) return Promise.resolve();
      return new Promise<void>((resolve) => {
        s.watchers.push({ count, resolve });
      });
    },
    arrivals(name) {
      return states.get(name)?.arrivals ?? 0;
    },
    waiting(name) {
      return states.get(name)?.waiters.size ?? 0;
    },
  };
}
