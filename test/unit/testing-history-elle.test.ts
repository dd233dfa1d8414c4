import { describe, expect, it } from 'vitest';
import {
  type AnomalyType,
  type ConsistencyModel,
  checkHistory,
  type History,
} from '../../src/testing/index.js';
import { listAppend, register } from '../fixtures/history-notation.js';

// Elle's own test histories (jepsen-io/elle, test/elle/list_append_test.clj and rw_register_test.clj),
// converted: Elle's `(op "ax1ry")` is `listAppend('ax1ry')`, a `:fail` op is `[…, 'abort']`, an
// `:info` op `[…, 'unknown']`, invoke/complete pairs a clock `[…, 'commit', process, start, end]`.
// Elle's anomaly names map onto ours (G-single-item → G-single, G-single-item-realtime →
// G-single-realtime); its bookkeeping ones (empty-transaction-graph, cycle-search-timeout) are left
// out. `elle` is what Elle reports when asked for that model (it reports only the anomalies the model
// forbids, as our `forbidden` does); `ours`, when present, is where we differ and why. docs/testing.md
// prints this table.

interface Case {
  readonly test: string;
  readonly history: History;
  readonly model: ConsistencyModel;
  /** Elle's strong session models: our model with session order. */
  readonly processOrder?: boolean;
  /** Elle was asked for these anomalies only (its `:anomalies` option): ours are filtered alike. */
  readonly anomalies?: readonly AnomalyType[];
  readonly elle: { readonly valid: boolean; readonly types: readonly string[] };
  readonly ours?: { readonly valid: boolean; readonly types: readonly AnomalyType[]; readonly why: string };
}

const clocked = (...texts: string[]) =>
  texts.map((t, i) => [t, 'commit', i, 2 * i, 2 * i + 1] as [string, 'commit', number, number, number]);

const ELLE_CASES: readonly Case[] = [
  {
    test: 'checker-test G0',
    history: listAppend('ax1ay1', 'ax2ay2', 'rx12ry21'),
    model: 'read-committed',
    elle: { valid: false, types: ['G0'] },
  },
  {
    test: 'checker-test G1a',
    history: listAppend(['ax1', 'abort'], 'rx1'),
    model: 'read-committed',
    elle: { valid: false, types: ['G1a'] },
  },
  {
    test: 'checker-test G1b',
    history: listAppend('ax1ax2', 'rx1'),
    model: 'serializable',
    elle: { valid: false, types: ['G1b', 'G-single'] },
  },
  {
    test: 'checker-test G1c',
    history: listAppend('ax1ry1', 'ax2ay1', 'rx12'),
    model: 'read-committed',
    elle: { valid: false, types: ['G1c'] },
  },
  {
    test: 'checker-test G-single',
    history: listAppend('ax1ay1', 'ax2ry', 'rx12'),
    model: 'snapshot-isolation',
    elle: { valid: false, types: ['G-single'] },
  },
  {
    test: 'checker-test G2 (read committed)',
    history: listAppend('ax1ry', 'ay1rx'),
    model: 'read-committed',
    elle: { valid: true, types: [] },
  },
  {
    test: 'checker-test G2 (serializable)',
    history: listAppend('ax1ry', 'ay1rx'),
    model: 'serializable',
    elle: { valid: false, types: ['G2-item'] },
  },
  {
    test: 'checker-test Strong SI violation (serializable)',
    history: listAppend(...clocked('ax1', 'ax2', 'rx1', 'rx12')),
    model: 'serializable',
    elle: { valid: true, types: [] },
  },
  {
    test: 'checker-test Strong SI violation (strict)',
    history: listAppend(...clocked('ax1', 'ax2', 'rx1', 'rx12')),
    model: 'strict-serializable',
    elle: { valid: false, types: ['G-single-realtime'] },
  },
  {
    test: 'checker-test Strong Session SI violation',
    // process 1 ran ax2 then rx1 (Elle: strong-session-snapshot-isolation)
    history: listAppend(
      ['ax1', 'commit', 0, 0, 1],
      ['ax2', 'commit', 1, 2, 3],
      ['rx1', 'commit', 1, 4, 5],
      ['rx12', 'commit', 2, 6, 7],
    ),
    model: 'snapshot-isolation',
    processOrder: true,
    elle: { valid: false, types: ['G-single-process'] },
  },
  {
    test: 'checker-test G-nonadjacent-process (serializable)',
    history: listAppend(
      ['rxrz1', 'commit', 0, 0, 1],
      ['ax1', 'commit', 1, 2, 3],
      ['rz', 'commit', 1, 4, 5],
      ['az1', 'commit', 2, 6, 7],
    ),
    model: 'serializable',
    elle: { valid: true, types: [] },
  },
  {
    test: 'checker-test G-nonadjacent-process (strong session SI)',
    history: listAppend(
      ['rxrz1', 'commit', 0, 0, 1],
      ['ax1', 'commit', 1, 2, 3],
      ['rz', 'commit', 1, 4, 5],
      ['az1', 'commit', 2, 6, 7],
    ),
    model: 'snapshot-isolation',
    processOrder: true,
    elle: { valid: false, types: ['G-nonadjacent-process'] },
  },
  {
    test: 'wr-process-test (strong session SI)',
    // process 1 read x = [1] and appended 1 to y; process 2 read y = [1], then appended 1 to x
    history: listAppend(
      ['rx1ay1', 'commit', 1, 0, 1],
      ['ry1', 'commit', 2, 2, 3],
      ['ax1', 'commit', 2, 4, 5],
    ),
    model: 'snapshot-isolation',
    processOrder: true,
    elle: { valid: false, types: ['G1c-process'] },
  },
  {
    test: 'checker-test contradictory read orders',
    history: listAppend('ax1ry1', 'ax2', 'ax3ay1', 'rx13', 'rx123'),
    model: 'read-committed',
    elle: { valid: false, types: ['G1c', 'incompatible-order'] },
  },
  {
    test: 'checker-test dirty update (direct)',
    history: listAppend(['ax1', 'abort'], 'ax2', 'rx12'),
    model: 'read-committed',
    anomalies: ['dirty-update'],
    elle: { valid: false, types: ['dirty-update'] },
  },
  {
    test: 'checker-test dirty update (indirect)',
    history: listAppend(['ax1', 'abort'], ['ax2', 'unknown'], 'ax3', 'rx123'),
    model: 'read-committed',
    anomalies: ['dirty-update'],
    elle: { valid: false, types: ['dirty-update'] },
  },
  {
    test: 'checker-test duplicated elements',
    history: listAppend('ax1ry1', 'ax2ay1', 'rx121'),
    model: 'read-committed',
    elle: { valid: false, types: ['G1c', 'duplicate-elements'] },
  },
  {
    test: 'checker-test internal consistency violation',
    history: listAppend('ax1ax2ax4', 'ax3rx1234'),
    model: 'serializable',
    anomalies: ['internal'],
    elle: { valid: false, types: ['internal'] },
  },
  {
    test: 'unobserved-write-test',
    history: listAppend('ax1ay1', 'ax2ay2', 'ax3ay3', 'rx12', 'ry2'),
    model: 'serializable',
    elle: { valid: false, types: ['G0', 'G-single'] },
  },
  {
    test: 'repeatable-read-test (read committed)',
    history: listAppend('rxay1', 'ryax1'),
    model: 'read-committed',
    elle: { valid: true, types: [] },
  },
  {
    test: 'G-nonadjacent-test',
    history: listAppend('ax1', 'rx1ry', 'ay1', 'ry1rx'),
    model: 'snapshot-isolation',
    elle: { valid: false, types: ['G-nonadjacent'] },
  },
  {
    test: 'snapshot-isolation valid (5 keys)',
    history: listAppend('rx5ay1', 'ryaz2', 'rzat3', 'rt3au4', 'ruax5'),
    model: 'snapshot-isolation',
    elle: { valid: true, types: [] },
  },
  {
    test: 'lost-update-test',
    history: listAppend('ax0', 'rx0ax1', 'rx0ax2'),
    model: 'serializable',
    elle: { valid: false, types: ['G2-item', 'lost-update'] },
  },
  {
    test: 'lost-update-test one txn, double write',
    history: listAppend('rxax1ax2', 'rx12'),
    model: 'serializable',
    elle: { valid: true, types: [] },
  },
  {
    test: 'rr-g-single-item-test',
    history: listAppend('ax1ay1', 'rx1ry'),
    model: 'snapshot-isolation',
    elle: { valid: false, types: ['G-single'] },
  },
  {
    test: 'rr-g-nonadjacent-item-test',
    history: listAppend('ax1at1', 'rx1ry', 'ay1az2', 'rz2rt'),
    model: 'snapshot-isolation',
    elle: { valid: false, types: ['G-nonadjacent'] },
  },
  {
    test: 'future-read-test',
    history: listAppend('rx1ax1'),
    model: 'read-committed',
    elle: { valid: false, types: ['future-read'] },
  },
  {
    test: 'rw-register checker-test G0 (no reads)',
    history: register('wx1wy2', 'wx2wy1'),
    model: 'read-committed',
    elle: { valid: true, types: [] },
  },
  {
    test: 'rw-register checker-test G0 (sequential keys)',
    history: register(
      ['wx1wy2', 'commit', 0, 0, 1],
      ['wx2wy1', 'commit', 1, 2, 3],
      ['rx2', 'commit', 0, 4, 5],
      ['ry2', 'commit', 1, 6, 7],
    ),
    model: 'read-committed',
    elle: { valid: false, types: ['G0'] },
    ours: {
      valid: true,
      types: [],
      why: 'no sequential-keys option: register versions are ordered only by reads followed by writes',
    },
  },
  {
    test: 'rw-register checker-test G1a',
    history: register('rx1', ['wx1', 'abort']),
    model: 'read-committed',
    elle: { valid: false, types: ['G1a'] },
  },
  {
    test: 'rw-register checker-test G1b',
    history: register('wx1wx2', 'rx1'),
    model: 'read-committed',
    elle: { valid: false, types: ['G1b'] },
  },
  {
    test: 'rw-register checker-test G-single (no transaction order)',
    history: register('rx_wy2', 'wx3wy4'),
    model: 'serializable',
    elle: { valid: true, types: [] },
  },
  {
    test: 'rw-register checker-test G2-item (no transaction order)',
    history: register('wx1wy2wz3', 'rx1wy5', 'rz3wx4', 'wz7wy8'),
    model: 'serializable',
    elle: { valid: true, types: [] },
  },
  {
    test: 'rw-register checker-test G1c',
    history: register('wx1ry1', 'wy1rx1'),
    model: 'read-committed',
    elle: { valid: false, types: ['G1c'] },
  },
];

describe("Elle's test histories", () => {
  it.each(ELLE_CASES.map((c) => [c.test, c] as const))('%s', (_name, c) => {
    const result = checkHistory(c.history, { model: c.model, processOrder: c.processOrder ?? false });
    const expected = c.ours ?? c.elle;
    const asked = c.anomalies;
    const types = asked ? result.forbidden.filter((t) => asked.includes(t)) : result.forbidden;
    expect({ valid: result.valid, types: [...types].sort() }).toEqual({
      valid: expected.valid,
      types: [...expected.types].sort(),
    });
  });

  it('the table: agree / disagree', () => {
    const agree = ELLE_CASES.filter((c) => !c.ours).length;
    expect(`${agree} agree, ${ELLE_CASES.length - agree} disagree`).toBe('33 agree, 1 disagree');
  });
});
