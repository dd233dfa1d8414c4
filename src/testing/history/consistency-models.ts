import type { AnomalyType } from './anomaly.js';

/**
 * The consistency models {@link checkHistory} decides. PostgreSQL's levels map onto them:
 * READ COMMITTED → `'read-committed'`, REPEATABLE READ → `'snapshot-isolation'`, SERIALIZABLE →
 * `'serializable'` (`'strict-serializable'` adds real-time order, which a single PostgreSQL server
 * also gives its serializable transactions).
 */
export type ConsistencyModel =
  | 'read-committed'
  | 'snapshot-isolation'
  | 'serializable'
  | 'strict-serializable';

/** The models, weakest first. */
export const CONSISTENCY_MODELS = [
  'read-committed',
  'snapshot-isolation',
  'serializable',
  'strict-serializable',
] as const satisfies readonly ConsistencyModel[];

const READ_COMMITTED: readonly AnomalyType[] = [
  // Adya's PL-2: no write cycles, no aborted or intermediate reads, no circular information flow
  'G0',
  'G1a',
  'G1b',
  'G1c',
  // a committed write on top of an aborted one
  'dirty-update',
  // no history of committed writes can produce these: a value never written, a value written only
  // later by the reader itself, an append seen twice, two orders of one list
  'garbage-read',
  'future-read',
  'duplicate-elements',
  'incompatible-order',
];

const SNAPSHOT_ISOLATION: readonly AnomalyType[] = [
  ...READ_COMMITTED,
  // a snapshot is read whole: one anti-dependency in a cycle means a torn snapshot (Adya's G-SI);
  // and (generalized SI) every cycle must hold two anti-dependencies in a row
  'G-single',
  'G-nonadjacent',
  // first committer wins: two transactions that read one version cannot both write the key
  'lost-update',
  // a transaction reads its snapshot plus its own writes, the same each time
  'internal',
];

const SERIALIZABLE: readonly AnomalyType[] = [
  ...SNAPSHOT_ISOLATION,
  // Adya's PL-3: no cycle at all, so also none made of two or more anti-dependencies (write skew)
  'G2-item',
];

/**
 * What each model forbids: a history satisfies a model when none of these is found. Not detected
 * (so never reported): predicate anomalies (G2 over predicates; the workloads read keys, not
 * predicates).
 */
export const FORBIDDEN_ANOMALIES = {
  'read-committed': READ_COMMITTED,
  'snapshot-isolation': SNAPSHOT_ISOLATION,
  serializable: SERIALIZABLE,
  'strict-serializable': [
    ...SERIALIZABLE,
    'G0-realtime',
    'G1c-realtime',
    'G-single-realtime',
    'G2-item-realtime',
  ],
} as const satisfies Record<ConsistencyModel, readonly AnomalyType[]>;
