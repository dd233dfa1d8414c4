import { describe, expect, it } from 'vitest';
import { gate } from '../../src/testing/gate.js';

/** Lets every already-resolved promise callback run (no timers). */
async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

describe('gate()', () => {
  it('holds code at a closed gate until the test opens it', async () => {
    const g = gate();
    const events: string[] = [];
    const worker = (async () => {
      events.push('before');
      await g.at('after-read');
      events.push('after');
    })();
    await g.reached('after-read');
    await flush();
    expect(events).toEqual(['before']);
    expect(g.waiting('after-read')).toBe(1);
    events.push('test acts');
    g.open('after-read');
    await worker;
    expect(events).toEqual(['before', 'test acts', 'after']);
    expect(g.waiting('after-read')).toBe(0);
  });

  it('lets arrivals pass at once when the gate was opened first', async () => {
    const g = gate();
    g.open('x');
    await g.at('x');
    await g.at('x');
    expect(g.arrivals('x')).toBe(2);
  });

  it('reached() resolves for arrivals that happened before the call', async () => {
    const g = gate();
    void g.at('x');
    await g.reached('x');
    expect(g.arrivals('x')).toBe(1);
    g.open('x');
  });

  it('reached(name, n) waits for n arrivals', async () => {
    const g = gate();
    let reached = false;
    const waiting = g.reached('x', 3).then(() => {
      reached = true;
    });
    const a = g.at('x');
    const b = g.at('x');
    await flush();
    expect(reached).toBe(false);
    const c = g.at('x');
    await waiting;
    expect(g.waiting('x')).toBe(3);
    g.open('x');
    await Promise.all([a, b, c]);
    expect(() => g.reached('x', 0)).toThrow(RangeError);
  });

  it('close() makes later arrivals wait again for the next open()', async () => {
    const g = gate();
    g.open('x');
    await g.at('x');
    g.close('x');
    let passed = false;
    const second = g.at('x').then(() => {
      passed = true;
    });
    await g.reached('x', 2);
    await flush();
    expect(passed).toBe(false);
    g.open('x');
    await second;
    expect(passed).toBe(true);
  });

  it('gates with different names are independent, and so are different gate() objects', async () => {
    const g = gate();
    const h = gate();
    let aPassed = false;
    const a = g.at('a').then(() => {
      aPassed = true;
    });
    g.open('b');
    h.open('a');
    await flush();
    expect(aPassed).toBe(false);
    expect(h.arrivals('a')).toBe(0);
    g.open('a');
    await a;
  });

  it('an aborted signal rejects the wait with its reason and removes the waiter', async () => {
    const g = gate();
    const controller = new AbortController();
    const waiting = g.at('x', controller.signal);
    await g.reached('x');
    controller.abort(new Error('test over'));
    await expect(waiting).rejects.toThrow('test over');
    expect(g.waiting('x')).toBe(0);
    await expect(g.at('x', AbortSignal.abort(new Error('already')))).rejects.toThrow('already');
  });
});
