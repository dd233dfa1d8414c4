import { err, ok, type Result } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import { LeaseLost } from '../../src/errors/errors.js';
import { ProgressWriter } from '../../src/queue/worker/progress-writer.js';

const job = { id: '1', leaseToken: '00000000-0000-4000-8000-000000000000' };

/** A write whose completion the test controls: each call waits until `release()`. */
function controlledWrite(outcome: () => Result<void, LeaseLost> = () => ok(undefined)) {
  const written: string[] = [];
  const waiting: (() => void)[] = [];
  const write = (_job: unknown, json: string) =>
    new Promise<Result<void, LeaseLost>>((resolve) => {
      written.push(json);
      waiting.push(() => resolve(outcome()));
    });
  const release = () => {
    for (const w of waiting.splice(0)) w();
  };
  return { written, write, release };
}

describe('ProgressWriter', () => {
  it('writes the first report at once, coalesces the rest to the last value, and flushes it', async () => {
    const w = controlledWrite();
    const writer = new ProgressWriter(job, 3_600_000, w.write, () => {});
    const first = writer.report('1');
    const later = [writer.report('2'), writer.report('3'), writer.report('4')];
    expect(w.written).toEqual(['1']); // one write in flight, the others wait
    w.release();
    expect((await first).isOk()).toBe(true);
    const flushed = writer.flush(); // starts the waiting write at once (no interval wait at the end)
    expect(w.written).toEqual(['1', '4']); // the last value wins
    w.release();
    await flushed;
    expect((await Promise.all(later)).every((r) => r.isOk())).toBe(true);
  });

  it('control: with interval 0 and no overlap, every report is a write', async () => {
    const w = controlledWrite();
    const writer = new ProgressWriter(job, 0, w.write, () => {});
    for (const v of ['1', '2', '3']) {
      const r = writer.report(v);
      w.release();
      expect((await r).isOk()).toBe(true);
    }
    expect(w.written).toEqual(['1', '2', '3']);
  });

  it('after LeaseLost: calls onLost once, drops the waiting value, refuses later reports without writing', async () => {
    const w = controlledWrite(() => err(new LeaseLost('1')));
    let lost = 0;
    const writer = new ProgressWriter(job, 0, w.write, () => lost++);
    const a = writer.report('1');
    const b = writer.report('2');
    w.release();
    expect((await a)._unsafeUnwrapErr().kind).toBe('LeaseLost');
    expect((await b)._unsafeUnwrapErr().kind).toBe('LeaseLost');
    expect((await writer.report('3'))._unsafeUnwrapErr().kind).toBe('LeaseLost');
    await writer.flush();
    expect(w.written).toEqual(['1']);
    expect(lost).toBe(1);
  });

  it('close() resolves the waiting report with LeaseLost and writes nothing more', async () => {
    const w = controlledWrite();
    const writer = new ProgressWriter(job, 3_600_000, w.write, () => {});
    const a = writer.report('1');
    const b = writer.report('2');
    writer.close();
    expect((await b)._unsafeUnwrapErr().kind).toBe('LeaseLost');
    w.release();
    expect((await a).isOk()).toBe(true);
    await writer.flush();
    expect(w.written).toEqual(['1']);
  });
});
