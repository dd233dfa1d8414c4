import type { Propagation } from './tx-options.js';

/**
 * What `do()` does for a propagation mode:
 * - `begin`: start an outermost transaction (with retries) on a new client;
 * - `join`: run in the active transaction (same client, no savepoint, no retry here);
 * - `savepoint`: run in the active transaction inside a generated SAVEPOINT;
 * - `beginIndependent`: start a separate outermost transaction on ANOTHER client while one is active
 *   (fails fast when the pool has no free client, instead of waiting on itself forever);
 * - `notInTransaction`: refuse (`mandatory` outside a transaction).
 */
export type ScopePlan = 'begin' | 'join' | 'savepoint' | 'beginIndependent' | 'notInTransaction';

function unreachable(value: never): never {
  throw new TypeError(`unknown propagation ${String(value)}`);
}

/**
 * Decides how a `do()` call with `mode` runs, given whether a transaction is active in the current
 * async context (of this manager).
 *
 * | mode        | no active transaction | active transaction  |
 * |-------------|-----------------------|---------------------|
 * | required    | begin                 | join                |
 * | nested      | begin                 | savepoint           |
 * | requiresNew | begin                 | beginIndependent    |
 * | mandatory   | notInTransaction      | join                |
 *
 * @example
 * planScope('nested', true); // 'savepoint'
 */
export function planScope(mode: Propagation, active: boolean): ScopePlan {
  switch (mode) {
    case 'required':
      return active ? 'join' : 'begin';
    case 'nested':
      return active ? 'savepoint' : 'begin';
    case 'requiresNew':
      return active ? 'beginIndependent' : 'begin';
    case 'mandatory':
      return active ? 'join' : 'notInTransaction';
    default:
      return unreachable(mode);
  }
}
