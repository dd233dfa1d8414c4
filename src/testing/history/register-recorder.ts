import type { HistoryKey, HistoryValue, RegisterHistory, RegisterOp } from './history.js';
import { HistoryRecorder, RecordedTransaction } from './history-recorder.js';

/** A read-write-register transaction being recorded: what {@link HistoryRecorder.begin} returns on a {@link RegisterRecorder}. */
export class RegisterTransaction extends RecordedTransaction<RegisterOp> {
  /** It wrote `value` to `key` (the statement returned). */
  write(key: HistoryKey, value: HistoryValue): this {
    return this.push({ f: 'write', key, value });
  }

  /** It read `key` (`null` when it had no value). */
  read(key: HistoryKey, value: HistoryValue | null): this {
    return this.push({ f: 'read', key, value });
  }
}

/**
 * Records a read-write-register workload for {@link checkHistory}: each client calls `begin()`
 * before its BEGIN, records each write and read as it returns, and ends the transaction with its
 * outcome. Values written to one key must be unique (a counter).
 *
 * @example
 * const recorder = new RegisterRecorder();
 * const t = recorder.begin('client-1');
 * t.read('x', null).write('x', 1).commit();
 * checkHistory(recorder.history(), { model: 'read-committed' }).valid; // true
 */
export class RegisterRecorder extends HistoryRecorder<RegisterOp, RegisterTransaction> {
  constructor() {
    super((process, clock) => new RegisterTransaction(process, clock));
  }

  /** The history recorded so far. */
  history(): RegisterHistory {
    return { workload: 'rw-register', transactions: this.transactions() };
  }
}
