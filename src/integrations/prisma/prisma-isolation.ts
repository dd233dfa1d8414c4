import type { IsolationLevel } from '@prisma/driver-adapter-utils';
import { InvalidOptions } from '../../errors/index.js';
import type { Isolation } from '../../tx/types.js';

/**
 * The manager's isolation for Prisma's `isolationLevel` (`$transaction(fn, { isolationLevel })`, or the
 * client's `transactionOptions`). `READ UNCOMMITTED` is `read committed` (PostgreSQL runs it so);
 * `SNAPSHOT` is SQL Server's and refused.
 *
 * @example
 * prismaIsolation('SERIALIZABLE'); // → 'serializable'
 */
export function prismaIsolation(level: IsolationLevel): Isolation {
  switch (level) {
    case 'READ UNCOMMITTED':
    case 'READ COMMITTED':
      return 'read committed';
    case 'REPEATABLE READ':
      return 'repeatable read';
    case 'SERIALIZABLE':
      return 'serializable';
    default:
      throw new InvalidOptions([
        { path: ['isolationLevel'], message: `PostgreSQL has no isolation level ${String(level)}` },
      ]);
  }
}
