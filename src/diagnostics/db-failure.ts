import { classify, type DatabaseFailure } from '../errors/index.js';

/**
 * Maps a thrown value to a {@link DatabaseFailure}; anything else (a bug) is rethrown unchanged, as
 * defects must propagate.
 *
 * @example
 * try { await pool.query(sql); } catch (e) { return err(toDatabaseFailure(e)); }
 */
export function toDatabaseFailure(error: unknown): DatabaseFailure {
  const failure = classify(error);
  if (failure === undefined) throw error;
  return failure;
}
