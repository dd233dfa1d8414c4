import { err, ok, type Result } from 'neverthrow';
import pg from 'pg';
import { describe, expectTypeOf, it } from 'vitest';
import { ConditionFailed, type TxError } from '../../src/errors/index.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import type { Tx } from '../../src/tx/types.js';

// Type-level tests: `npx tsc -p tsconfig.json --noEmit` (part of `npm test`) fails when a signature
// drifts; at run time the bodies are never awaited against a database.
const tm = new TxManager(new pg.Pool({ max: 1 }));
declare const tx: Tx;
declare const seat: Result<{ id: number }[], ConditionFailed>;

describe('TxManager types', () => {
  it('tx.query takes a row type like pg', () => {
    const one = () => tx.query<{ n: number }>('select 1 as n');
    expectTypeOf(one).returns.resolves.toHaveProperty('rows').toEqualTypeOf<{ n: number }[]>();
    interface Account {
      id: number;
      balance: string;
    }
    const accounts = () => tx.query<Account>('select * from accounts');
    expectTypeOf(accounts).returns.resolves.toHaveProperty('rows').toEqualTypeOf<Account[]>();
  });

  it("tm.do's success type excludes Err branches (an early `return r` of an Err)", () => {
    const booked = () =>
      tm.do(async () => {
        if (seat.isErr()) return seat;
        return 'booked' as const;
      });
    type R = Awaited<ReturnType<typeof booked>>;
    expectTypeOf<R extends Result<infer T, unknown> ? T : never>().toEqualTypeOf<'booked'>();
    expectTypeOf<R extends Result<unknown, infer E> ? E : never>().toEqualTypeOf<ConditionFailed | TxError>();
  });

  it('ok / err returns give their value and error types', () => {
    const call = () =>
      tm.do(async (t) => {
        const { rows } = await t.query<{ n: number }>('select 1 as n');
        const n = rows[0]?.n ?? 0;
        return n > 0 ? ok(n) : err(new ConditionFailed());
      });
    type R = Awaited<ReturnType<typeof call>>;
    expectTypeOf<R extends Result<infer T, unknown> ? T : never>().toEqualTypeOf<number>();
    expectTypeOf<R extends Result<unknown, infer E> ? E : never>().toEqualTypeOf<ConditionFailed | TxError>();
  });

  it('doOrThrow resolves with the success type only', () => {
    const call = () =>
      tm.doOrThrow(async () => {
        if (seat.isErr()) return seat;
        return seat.value.length;
      });
    expectTypeOf(call).returns.resolves.toEqualTypeOf<number>();
  });

  it('a plain value is the success type and only TxError can come back', () => {
    const call = () => tm.do(() => 42);
    type R = Awaited<ReturnType<typeof call>>;
    expectTypeOf<R extends Result<infer T, unknown> ? T : never>().toEqualTypeOf<number>();
    expectTypeOf<R extends Result<unknown, infer E> ? E : never>().toEqualTypeOf<TxError>();
  });
});
