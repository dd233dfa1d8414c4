// Public surface of the patterns module (re-exports only): one tool per kind of invariant.
export { type BookInput, type BookingPeriod, Bookings, type BookingsOptions } from './bookings.js';
export {
  type IdempotencyError,
  IdempotencyKeys,
  type IdempotencyKeysOptions,
  type IdempotencyRunOptions,
  type IdempotentResult,
} from './idempotency-keys.js';
export { type InsertOnceOptions, type InsertOnceResult, insertOnce } from './insert-once.js';
export { type LockedRows, type LockRowsOptions, lockRows } from './lock-rows.js';
export { type ConditionalQuery, type UpdateWhereOptions, updateWhere } from './update-where.js';
export { type UpsertOptions, type UpsertResult, upsert } from './upsert.js';
