import { describe, expect, it } from 'vitest';
import {
  type Anomaly,
  checkHistory,
  HistoryError,
  ListAppendRecorder,
  RegisterRecorder,
} from '../../src/testing/index.js';
import { listAppend, register } from '../fixtures/history-notation.js';

// What must hold: each anomaly of Adya's list (and Elle's direct ones) is named on a hand-written
// history that shows it and nothing stronger, with the cycle that proves it; the model decides which
// of them make the history invalid; a serial history (the control) passes every model.

const only = (anomalies: readonly Anomaly[], type: Anomaly['type']) =>
  anomalies.filter((a) => a.type === type);
const cycleOf = (a: Anomaly | undefined) => a?.cycle?.map((s) => `T${s.from}-${s.kind}->T${s.to}`);

describe('checkHistory: list-append', () => {
  it('a serial history (the control) shows nothing and satisfies every model', () => {
    const h = listAppend(
      ['ax1', 'commit', 0, 0, 1],
      ['rx1ax2', 'commit', 0, 2, 3],
      ['rx12ay1', 'commit', 1, 4, 5],
      ['rx12ry1', 'commit', 2, 6, 7],
    );
    const result = checkHistory(h, { model: 'strict-serializable' });
    expect(result.anomalies).toEqual([]);
    expect(result.valid).toBe(true);
    expect(result.satisfies).toEqual([
      'read-committed',
      'snapshot-isolation',
      'serializable',
      'strict-serializable',
    ]);
    expect(result.dependencies).toBeGreaterThan(0);
  });

  it('G0: two transactions overwrote each other in both orders', () => {
    const result = checkHistory(listAppend('ax1ay1', 'ax2ay2', 'rx12ry21'), { model: 'read-committed' });
    expect(result.anomalyTypes).toEqual(['G0']);
    expect(result.valid).toBe(false);
    expect(result.forbidden).toEqual(['G0']);
    expect(cycleOf(result.anomalies[0])).toEqual(['T1-ww->T0', 'T0-ww->T1']);
    expect(result.anomalies[0]?.explanation).toContain('a contradiction!');
  });

  it('G1a: a committed read of an aborted append', () => {
    const result = checkHistory(listAppend(['ax1', 'abort'], 'rx1'), { model: 'read-committed' });
    expect(result.anomalyTypes).toEqual(['G1a']);
    expect(result.anomalies[0]).toMatchObject({ type: 'G1a', key: 'x', transactions: [0, 1] });
    expect(result.satisfies).toEqual([]);
  });

  it('G1b: a read ending at an intermediate append', () => {
    const result = checkHistory(listAppend('ax1ax2', 'rx1'));
    expect(result.anomalyTypes).toEqual(['G1b', 'G-single']);
    expect(only(result.anomalies, 'G1b')[0]).toMatchObject({ key: 'x', transactions: [0, 1] });
  });

  it('G1c: circular information flow (ww and wr)', () => {
    const result = checkHistory(listAppend('ax1ry1', 'ax2ay1', 'rx12'), { model: 'read-committed' });
    expect(result.anomalyTypes).toEqual(['G1c']);
    expect(result.valid).toBe(false);
    expect(cycleOf(result.anomalies[0])).toEqual(['T1-wr->T0', 'T0-ww->T1']);
  });

  it('G-single: read skew, allowed by read committed, forbidden by snapshot isolation', () => {
    const h = listAppend('ax1ay1', 'ax2ry', 'rx12');
    expect(checkHistory(h, { model: 'read-committed' }).valid).toBe(true);
    const result = checkHistory(h, { model: 'snapshot-isolation' });
    expect(result.valid).toBe(false);
    expect(result.anomalyTypes).toEqual(['G-single']);
    expect(cycleOf(result.anomalies[0])).toEqual(['T1-rw->T0', 'T0-ww->T1']);
  });

  it('G2-item: write skew, allowed by snapshot isolation, forbidden by serializable', () => {
    const h = listAppend('ax1ry', 'ay1rx');
    expect(checkHistory(h, { model: 'snapshot-isolation' }).valid).toBe(true);
    const result = checkHistory(h, { model: 'serializable' });
    expect(result.valid).toBe(false);
    expect(result.anomalyTypes).toEqual(['G2-item']);
    expect(cycleOf(result.anomalies[0])).toEqual(['T1-rw->T0', 'T0-rw->T1']);
    expect(result.satisfies).toEqual(['read-committed', 'snapshot-isolation']);
  });

  it('G-nonadjacent: two anti-dependencies that never follow each other, forbidden by snapshot isolation', () => {
    const h = listAppend('ax1', 'rx1ry', 'ay1', 'ry1rx');
    expect(checkHistory(h, { model: 'read-committed' }).valid).toBe(true);
    const result = checkHistory(h, { model: 'snapshot-isolation' });
    expect(result.anomalyTypes).toEqual(['G-nonadjacent']);
    const kinds = result.anomalies[0]?.cycle?.map((s) => s.kind) ?? [];
    expect(kinds.filter((k) => k === 'rw')).toHaveLength(2);
    expect(kinds.some((k, i) => k === 'rw' && kinds[(i + 1) % kinds.length] === 'rw')).toBe(false);
  });

  it('lost update: two transactions read the same list and both appended', () => {
    const result = checkHistory(listAppend('rxax1', 'rxax2', 'rx12'), { model: 'snapshot-isolation' });
    expect(only(result.anomalies, 'lost-update')[0]).toMatchObject({ key: 'x', transactions: [0, 1] });
    expect(result.forbidden).toEqual(['G-single', 'lost-update']);
    // read committed allows it (PostgreSQL's READ COMMITTED does)
    expect(checkHistory(listAppend('rxax1', 'rxax2', 'rx12'), { model: 'read-committed' }).valid).toBe(true);
  });

  it('a lost update by a naive read-modify-write (the second write replaced the list): G-single and lost update', () => {
    // T1 and T2 both read [1]; T2's write replaced T1's, so a later read sees [1 3]: 2 was lost. The
    // unread append of 2 comes after 3 (ww T2 -> T1), and T1 read [1] before 3 was appended (rw T1 -> T2)
    const result = checkHistory(listAppend('ax1', 'rx1ax2', 'rx1ax3', 'rx13'));
    expect(result.anomalyTypes).toEqual(['G-single', 'lost-update']);
    expect(cycleOf(result.anomalies[0])).toEqual(['T1-rw->T2', 'T2-ww->T1']);
  });

  it('realtime: a read that missed a write finished before it began (strict serializable only)', () => {
    const h = listAppend(
      ['ax1', 'commit', 0, 0, 1],
      ['ax2', 'commit', 1, 2, 3],
      ['rx1', 'commit', 2, 4, 5],
      ['rx12', 'commit', 3, 6, 7],
    );
    expect(checkHistory(h, { model: 'serializable' }).valid).toBe(true);
    const result = checkHistory(h, { model: 'strict-serializable' });
    expect(result.anomalyTypes).toEqual(['G-single-realtime']);
    expect(cycleOf(result.anomalies[0])).toEqual(['T2-rw->T1', 'T1-realtime->T2']);
  });

  it('processOrder: a client that does not see its own earlier commit (G-single-process)', () => {
    // client 1 appended 2 to x, then read x without it; the others ran at overlapping times
    const h = listAppend(
      ['ax1', 'commit', 0, 0, 9],
      ['ax2', 'commit', 1, 1, 2],
      ['rx1', 'commit', 1, 3, 4],
      ['rx12', 'commit', 2, 5, 10],
    );
    expect(checkHistory(h, { model: 'snapshot-isolation' }).valid).toBe(true);
    const result = checkHistory(h, { model: 'snapshot-isolation', processOrder: true });
    expect(result).toMatchObject({ valid: false, processOrder: true, forbidden: ['G-single-process'] });
    expect(cycleOf(result.anomalies[0])).toEqual(['T2-rw->T1', 'T1-process->T2']);
    expect(result.anomalies[0]?.explanation).toContain('committed before its client ran T2 (process)');
  });

  it('internal, duplicate elements, garbage reads, incompatible orders', () => {
    expect(checkHistory(listAppend('ax3rx12')).anomalyTypes).toContain('internal');
    expect(checkHistory(listAppend('ax1', 'rx11')).anomalyTypes).toContain('duplicate-elements');
    expect(checkHistory(listAppend('ax1', 'rx19')).anomalyTypes).toContain('garbage-read');
    expect(checkHistory(listAppend('ax1', 'ax2', 'rx12', 'rx21')).anomalyTypes).toContain(
      'incompatible-order',
    );
  });

  it('reads of aborted or unknown transactions are not evidence; their writes seen by others are', () => {
    // T0 of unknown outcome: its append was read, so it committed, and ordered after T1
    const result = checkHistory(listAppend(['ax2ry', 'unknown'], 'ax1ay1', 'rx12'));
    expect(result.valid).toBe(true);
    expect(checkHistory(listAppend(['rx9', 'abort'])).anomalies).toEqual([]);
  });
});

describe('checkHistory: rw-register', () => {
  it('the control: serial reads and writes pass', () => {
    const result = checkHistory(register('rx_wx1', 'rx1wx2', 'rx2ry_wy3'));
    expect(result.anomalies).toEqual([]);
  });

  it('write skew: both read both keys in their initial state, each wrote one (G2-item)', () => {
    const h = register('rx_ry_wx1', 'rx_ry_wy2');
    expect(checkHistory(h, { model: 'snapshot-isolation' }).valid).toBe(true);
    const result = checkHistory(h, { model: 'serializable' });
    expect(result.anomalyTypes).toEqual(['G2-item']);
  });

  it('lost update: both read 0 and wrote a new value', () => {
    const result = checkHistory(register('wx0', 'rx0wx1', 'rx0wx2'), { model: 'snapshot-isolation' });
    expect(only(result.anomalies, 'lost-update')[0]).toMatchObject({ key: 'x', transactions: [1, 2] });
    expect(result.valid).toBe(false);
    expect(checkHistory(register('wx0', 'rx0wx1', 'rx1wx2')).valid).toBe(true);
  });

  it('G1a and G1b', () => {
    expect(checkHistory(register(['wx1', 'abort'], 'rx1')).anomalyTypes).toEqual(['G1a']);
    expect(checkHistory(register('wx1wx2', 'rx1')).anomalyTypes).toContain('G1b');
  });

  it('G-single: T1 saw T0 write x but not T0 write y', () => {
    const result = checkHistory(register('wx1wy1', 'rx1ry_'), { model: 'snapshot-isolation' });
    expect(result.anomalyTypes).toEqual(['G-single']);
  });
});

describe('recorders', () => {
  it('record what clients did, with a shared clock and outcomes', () => {
    const h = new ListAppendRecorder();
    const t1 = h.begin('p1');
    const t2 = h.begin('p2');
    t1.read('x', null).read('y', []);
    t2.read('x', []).read('y', null);
    t1.append('x', 1).commit();
    t2.append('y', 1).commit();
    h.begin('p3').read('x', [1]).read('y', [1]).commit();
    h.begin('p4').append('z', 1); // never ended: unknown
    const history = h.history();
    expect(history.transactions.map((t) => t.outcome)).toEqual(['commit', 'commit', 'commit', 'unknown']);
    expect(history.transactions[0]).toMatchObject({ process: 'p1', start: 0, end: 2 });
    const result = checkHistory(history, { model: 'serializable' });
    expect(result.anomalyTypes).toEqual(['G2-item']);
  });

  it('a register recorder; a transaction ends once', () => {
    const h = new RegisterRecorder();
    const t = h.begin(1);
    t.read('x', null).write('x', 5).abort();
    expect(() => t.commit()).toThrow(/already ended \(abort\)/);
    expect(() => t.write('x', 6)).toThrow(/already ended/);
    expect(h.history().transactions[0]?.outcome).toBe('abort');
  });
});

describe('checkHistory: bad input is a HistoryError with the position and what to do', () => {
  const reason = (f: () => unknown) => {
    try {
      f();
    } catch (error) {
      expect(error).toBeInstanceOf(HistoryError);
      const e = error as HistoryError;
      return { reason: e.reason, transaction: e.transaction, operation: e.operation, message: e.message };
    }
    throw new Error('no error');
  };

  it('an operation on no key', () => {
    const h = {
      workload: 'list-append',
      transactions: [{ outcome: 'commit', ops: [{ f: 'append', value: 1 }] }],
    };
    expect(reason(() => checkHistory(h as never))).toMatchObject({
      reason: 'no-key',
      transaction: 0,
      operation: 0,
      message: expect.stringContaining('every operation names the key'),
    });
  });

  it('an unknown outcome', () => {
    const h = { workload: 'rw-register', transactions: [{ outcome: 'ok', ops: [] }] };
    expect(reason(() => checkHistory(h as never))).toMatchObject({
      reason: 'unknown-outcome',
      transaction: 0,
      message: expect.stringContaining("use 'commit'"),
    });
  });

  it('a value written twice to one key, a write in a list-append history, a bad read, a clock backwards', () => {
    expect(reason(() => checkHistory(listAppend('ax1', 'ax1')))).toMatchObject({
      reason: 'duplicate-write',
      transaction: 1,
    });
    const wrong = {
      workload: 'list-append',
      transactions: [{ outcome: 'commit', ops: [{ f: 'write', key: 'x', value: 1 }] }],
    };
    expect(reason(() => checkHistory(wrong as never))).toMatchObject({
      reason: 'unknown-operation',
      message: expect.stringContaining("'rw-register'"),
    });
    const bad = {
      workload: 'list-append',
      transactions: [{ outcome: 'commit', ops: [{ f: 'read', key: 'x', value: 3 }] }],
    };
    expect(reason(() => checkHistory(bad as never))).toMatchObject({ reason: 'bad-read', operation: 0 });
    const clock = {
      workload: 'list-append',
      transactions: [{ outcome: 'commit', ops: [], start: 5, end: 1 }],
    };
    expect(reason(() => checkHistory(clock as never))).toMatchObject({ reason: 'bad-clock' });
    expect(reason(() => checkHistory({ workload: 'kv', transactions: [] } as never))).toMatchObject({
      reason: 'unknown-workload',
    });
  });

  it('processOrder needs the client of every transaction that did not abort', () => {
    expect(reason(() => checkHistory(listAppend('ax1'), { processOrder: true }))).toMatchObject({
      reason: 'no-process',
      transaction: 0,
      message: expect.stringContaining('begin(process)'),
    });
  });

  it('strict serializability needs the clock; bad options are InvalidOptions', () => {
    expect(reason(() => checkHistory(listAppend('ax1'), { model: 'strict-serializable' }))).toMatchObject({
      reason: 'bad-clock',
      transaction: 0,
    });
    expect(() => checkHistory(listAppend('ax1'), { model: 'linearizable' as never })).toThrow(
      expect.objectContaining({ kind: 'InvalidOptions' }),
    );
  });
});
