import { err } from 'neverthrow';
import { describe, expect, it } from 'vitest';
import { ConditionFailed, TxManager } from '../../src/index.js';
import { registerOtel } from '../fixtures/otel-sdk.js';
import { useTestDatabase } from '../helpers.js';

const otel = registerOtel();
const { pool, db } = await useTestDatabase();

describe('OpenTelemetry spans of tm.do', () => {
  it('one span per transaction, a child span per attempt, a retry event with the kind and the delay', async () => {
    // The default: no telemetry option, the installed @opentelemetry/api is found.
    const tm = new TxManager(pool);
    otel.reset();
    let calls = 0;
    const value = await tm.doOrThrow(
      async (tx) => {
        calls++;
        await tx.query('SELECT 1');
        if (calls === 1) {
          // What pg raises on a serialization failure: retried by the default retryOn.
          await tx.query(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`);
        }
        return 42;
      },
      { name: 'transfer', isolation: 'serializable', backoff: { baseMs: 1, capMs: 2 } },
    );
    expect(value).toBe(42);
    const spans = otel.spans();
    const top = spans.find((s) => s.name === 'transaction transfer');
    expect(top).toBeDefined();
    expect(top?.attributes['db.system.name']).toBe('postgresql');
    expect(top?.attributes['db.namespace']).toBe(db.name);
    expect(top?.attributes['pg_txkit.tx.isolation']).toBe('serializable');
    expect(top?.attributes['pg_txkit.tx.attempts']).toBe(2);
    const attempts = spans.filter((s) => s.name === 'transaction.attempt');
    expect(attempts.map((s) => s.attributes['pg_txkit.tx.attempt'])).toEqual([1, 2]);
    for (const a of attempts) expect(a.parentSpanContext?.spanId).toBe(top?.spanContext().spanId);
    expect(attempts[0]?.attributes['error.type']).toBe('SerializationFailure');
    expect(attempts[0]?.status.code).toBe(2);
    expect(attempts[1]?.attributes['pg_txkit.tx.outcome']).toBe('committed');
    const retry = top?.events.find((e) => e.name === 'retry');
    expect(retry?.attributes?.['error.type']).toBe('SerializationFailure');
    expect(typeof retry?.attributes?.['pg_txkit.tx.retry_delay_ms']).toBe('number');
  });

  it('a span started inside the callback is a child of its attempt', async () => {
    const tm = new TxManager(pool);
    otel.reset();
    const { trace } = await import('@opentelemetry/api');
    await tm.doOrThrow(() => {
      trace.getTracer('app').startSpan('inside').end();
      return 1;
    });
    const spans = otel.spans();
    const inside = spans.find((s) => s.name === 'inside');
    const attempt = spans.find((s) => s.name === 'transaction.attempt');
    expect(inside?.parentSpanContext?.spanId).toBe(attempt?.spanContext().spanId);
  });

  it("a returned Err marks the transaction span failed with the error's kind", async () => {
    const tm = new TxManager(pool);
    otel.reset();
    const r = await tm.do(() => err(new ConditionFailed()), { name: 'guarded' });
    expect(r.isErr()).toBe(true);
    const top = otel.spans().find((s) => s.name === 'transaction guarded');
    expect(top?.status.code).toBe(2);
    expect(top?.attributes['error.type']).toBe('ConditionFailed');
  });

  it('telemetry: false creates no span', async () => {
    const tm = new TxManager(pool, { telemetry: false });
    otel.reset();
    await tm.doOrThrow(() => 1, { name: 'quiet' });
    expect(otel.spans()).toEqual([]);
  });
});

describe('transaction metrics', () => {
  it('counts attempts and retries by kind, in the snapshot and as OpenTelemetry counters', async () => {
    const tm = new TxManager(pool);
    let calls = 0;
    await tm.doOrThrow(
      async (tx) => {
        if (++calls < 3) await tx.query(`DO $$ BEGIN RAISE EXCEPTION 'd' USING ERRCODE = '40P01'; END $$`);
        return 1;
      },
      { backoff: { baseMs: 1, capMs: 2 } },
    );
    await tm.do(() => err(new ConditionFailed()));
    const m = tm.metrics();
    expect(m).toEqual({
      transactions: 2,
      committed: 1,
      attempts: 4,
      retries: { DeadlockDetected: 2 },
      failures: { ConditionFailed: 1 },
    });
    const retries = await otel.collect('pg_txkit.tx.retries');
    expect(
      retries.find((p) => p.attributes['error.type'] === 'DeadlockDetected')?.value,
    ).toBeGreaterThanOrEqual(2);
    const attempts = await otel.collect('pg_txkit.tx.attempts');
    expect(attempts.reduce((n, p) => n + p.value, 0)).toBeGreaterThanOrEqual(4);
  });
});
