// Type-level tests of the history checker's public signatures, through 'pg-txkit/testing'
// (src/testing/index.ts): checked by `npm run typecheck`; the assertions are declared, not run.
import { describe, expectTypeOf, it } from 'vitest';
import {
  type Anomaly,
  type AnomalyType,
  type CheckHistoryOptions,
  type ConsistencyModel,
  checkHistory,
  type HistoryCheck,
  type HistoryRecorder,
  type HistoryTransaction,
  type ListAppendHistory,
  type ListAppendOp,
  ListAppendRecorder,
  type ListAppendTransaction,
  type RegisterHistory,
  type RegisterOp,
  RegisterRecorder,
  type RegisterTransaction,
} from '../../src/testing/index.js';

const typesOnly = (block: () => void): void => {
  expectTypeOf(block).toBeFunction();
};

describe('checkHistory and the recorders: public types', () => {
  it('checkHistory takes a history of either workload and returns a HistoryCheck', () => {
    typesOnly(() => {
      expectTypeOf(checkHistory).parameter(0).toEqualTypeOf<ListAppendHistory | RegisterHistory>();
      expectTypeOf(checkHistory).returns.toEqualTypeOf<HistoryCheck>();
      expectTypeOf<CheckHistoryOptions['model']>().toEqualTypeOf<ConsistencyModel | undefined>();
      expectTypeOf<HistoryCheck['anomalies']>().toEqualTypeOf<readonly Anomaly[]>();
      expectTypeOf<Anomaly['type']>().toEqualTypeOf<AnomalyType>();
      // @ts-expect-error: no such model
      checkHistory({ workload: 'list-append', transactions: [] }, { model: 'linearizable' });
      const write = { f: 'write', key: 'x', value: 1 } as const;
      // @ts-expect-error: a list-append operation is an append or a read, not a register write
      const wrong: ListAppendOp = write;
      void wrong;
    });
  });

  it('each recorder records its own workload', () => {
    typesOnly(() => {
      const la = new ListAppendRecorder();
      expectTypeOf(la.begin('p')).toEqualTypeOf<ListAppendTransaction>();
      expectTypeOf(la.history()).toEqualTypeOf<ListAppendHistory>();
      expectTypeOf(la.history().transactions).toEqualTypeOf<readonly HistoryTransaction<ListAppendOp>[]>();
      // begin() is documented once, on the recorders' base, exported as a type
      expectTypeOf(la).toExtend<HistoryRecorder<ListAppendOp, ListAppendTransaction>>();
      expectTypeOf(new RegisterRecorder()).toExtend<HistoryRecorder<RegisterOp, RegisterTransaction>>();
      // @ts-expect-error: registers are written, not appended to
      new RegisterRecorder().begin('p').append('x', 1);
      expectTypeOf(new RegisterRecorder().begin('p')).toEqualTypeOf<RegisterTransaction>();
      // @ts-expect-error: a list read returns a list
      la.begin('p').read('x', 3);
    });
  });
});
