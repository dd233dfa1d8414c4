import type { HistoryKey, HistoryValue, ListAppendHistory, ListAppendOp } from './history.js';
import { HistoryRecorder, RecordedTransaction } from './history-recorder.js';

/** A list-append transaction being recorded: what {@link HistoryRecorder.begin} returns on a {@link ListAppendRecorder}. */
export class ListAppendTransaction extends RecordedTransaction<ListAppendOp> {
  /** It appended `value` to the list at `key` (the statement returned). */
  append(key: HistoryKey, value: HistoryValue): this {
    return this.push({ f: 'append', key, value });
  }

  /** It read the list at `key` (`null` or `[]` when there was none). */
  read(key: HistoryKey, value: readonly HistoryValue[] | null): this {
    return this.push({ f: 'read', key, value: value === null ? null : [...value] });
  }
}

/**
 * Records a list-append workload for {@link checkHistory}: each client calls `begin()` before its
 * BEGIN, records each append and read as it returns, and ends the transaction with its outcome.
 * Values appended to one key must be unique (a counter).
 *
 * @example
 * const recorder = new ListAppendRecorder();
 * const t = recorder.begin('client-1');
 * await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
 * const { rows } = await client.query('SELECT v FROM lists WHERE k = $1', ['x']);
 * t.read('x', rows[0]?.v ?? null);
 * await client.query('UPDATE lists SET v = v || $2::int WHERE k = $1', ['x', 7]);
 * t.append('x', 7);
 * await client.query('COMMIT');
 * t.commit();
 * checkHistory(recorder.history(), { model: 'snapshot-isolation' });
 */
export class ListAppendRecorder extends HistoryRecorder<ListAppendOp, ListAppendTransaction> {
  constructor() {
    super((process, clock) => new ListAppendTransaction(process, clock));
  }

  /** The history recorded so far. */
  history(): ListAppendHistory {
    return { workload: 'list-append', transactions: this.transactions() };
  }
}
