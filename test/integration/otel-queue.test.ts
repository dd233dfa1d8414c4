import * as api from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { Queue, TxManager } from '../../src/index.js';
import { gate } from '../../src/testing/gate.js';
import { registerOtel } from '../fixtures/otel-sdk.js';
import { eventually } from '../fixtures/queue-helpers.js';
import { setNextRun } from '../fixtures/schedule-helpers.js';
import { useTestDatabase } from '../helpers.js';

const otel = registerOtel();
const { pool } = await useTestDatabase();

describe('OpenTelemetry spans of the queue', () => {
  it('the processing span of every attempt links to the span that enqueued the job', async () => {
    const tm = new TxManager(pool);
    const queue = new Queue({
      pool,
      txManager: tm,
      schema: 'otel_q',
      tasks: { email: z.object({ to: z.string() }) },
      backoff: { baseMs: 1, capMs: 1 },
    });
    (await queue.migrate())._unsafeUnwrap();
    otel.reset();
    // The application's request span, around a business transaction that enqueues (the outbox).
    const request = api.trace.getTracer('app').startSpan('POST /signup');
    const enqueued = await api.context.with(api.trace.setSpan(api.context.active(), request), () =>
      tm.doOrThrow(async (tx) => (await queue.enqueue(tx, 'email', { to: 'a@example.com' }))._unsafeUnwrap()),
    );
    request.end();
    let runs = 0;
    const worker = queue.work(
      {
        email: async (_job, ctx) => {
          runs++;
          if (runs === 1) throw new Error('SMTP 451');
          await ctx.transaction((tx) => tx.query('SELECT 1'));
        },
      },
      { pollInterval: 20 },
    );
    try {
      await eventually(() => worker.counters.completed === 1);
    } finally {
      await worker.stop();
    }
    const spans = otel.spans();
    const send = spans.find((s) => s.name === 'send email');
    expect(send?.kind).toBe(api.SpanKind.PRODUCER);
    expect(send?.attributes['messaging.operation.type']).toBe('send');
    expect(send?.attributes['messaging.destination.name']).toBe('email');
    expect(send?.attributes['messaging.message.id']).toBe(enqueued.id);
    // Inside the business transaction's attempt, in the request's trace.
    expect(send?.spanContext().traceId).toBe(request.spanContext().traceId);
    const attempt = spans.find((s) => s.spanContext().spanId === send?.parentSpanContext?.spanId);
    expect(attempt?.name).toBe('transaction.attempt');
    const processes = spans.filter((s) => s.name === 'process email');
    expect(processes.map((p) => p.attributes['pg_txkit.job.attempt'])).toEqual([1, 2]);
    for (const p of processes) {
      expect(p.kind).toBe(api.SpanKind.CONSUMER);
      expect(p.attributes['messaging.operation.type']).toBe('process');
      expect(p.links.map((l) => l.context.spanId)).toEqual([send?.spanContext().spanId]);
      expect(p.links[0]?.context.traceId).toBe(request.spanContext().traceId);
    }
    expect(processes[0]?.attributes['pg_txkit.job.outcome']).toBe('failed');
    expect(processes[0]?.status.code).toBe(api.SpanStatusCode.ERROR);
    expect(processes[1]?.attributes['pg_txkit.job.outcome']).toBe('completed');
    // The handler's transaction nests under its processing span.
    const tx = spans.find(
      (s) => s.name === 'transaction' && s.parentSpanContext?.spanId === processes[1]?.spanContext().spanId,
    );
    expect(tx).toBeDefined();
    const processed = await otel.collect('pg_txkit.queue.jobs.processed');
    expect(processed.find((p) => p.attributes['pg_txkit.job.outcome'] === 'completed')?.value).toBe(1);
    expect(processed.find((p) => p.attributes['pg_txkit.job.outcome'] === 'failed')?.value).toBe(1);
  });

  it('a handler past handlerTimeout that ignores its signal: its span and the processed counter report the timeout when it returns', async () => {
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'otel_q_timeout',
      tasks: { slow: z.object({}) },
      backoff: { baseMs: 0, capMs: 0 },
    });
    (await queue.migrate())._unsafeUnwrap();
    otel.reset();
    (await queue.enqueue(pool, 'slow', {}, { maxAttempts: 1 }))._unsafeUnwrap();
    const g = gate();
    const worker = queue.work(
      {
        slow: async (_job, { signal }) => {
          signal.addEventListener('abort', () => void g.at('aborted'), { once: true });
          await g.at('third-party call'); // takes no signal
        },
      },
      { handlerTimeout: 30 },
    );
    const slow = (points: { attributes: Record<string, unknown> }[]) =>
      points.filter((p) => p.attributes['messaging.destination.name'] === 'slow');
    try {
      await g.reached('aborted');
      // Timed out, still running: it holds its slot, its span is open and nothing is counted yet.
      expect(worker.active).toBe(1);
      expect(otel.spans().filter((s) => s.name === 'process slow')).toEqual([]);
      expect(slow(await otel.collect('pg_txkit.queue.jobs.processed'))).toEqual([]);
      g.open('third-party call');
      await eventually(() => worker.counters.dead === 1);
    } finally {
      g.open('third-party call');
      await worker.stop();
    }
    const [span] = otel.spans().filter((s) => s.name === 'process slow');
    expect(span?.attributes['pg_txkit.job.outcome']).toBe('dead');
    expect(span?.attributes['error.type']).toBe('HandlerTimeout');
    expect(span?.status.code).toBe(api.SpanStatusCode.ERROR);
    expect(slow(await otel.collect('pg_txkit.queue.jobs.processed'))).toEqual([
      {
        attributes: {
          'messaging.destination.name': 'slow',
          'pg_txkit.job.outcome': 'dead',
          'error.type': 'HandlerTimeout',
        },
        value: 1,
      },
    ]);
  });

  it('enqueueMany stores one trace context for the batch', async () => {
    const tm = new TxManager(pool);
    const queue = new Queue({
      pool,
      txManager: tm,
      schema: 'otel_q2',
      tasks: { t: z.object({ n: z.number() }) },
    });
    (await queue.migrate())._unsafeUnwrap();
    otel.reset();
    (await queue.enqueueMany(pool, 't', [{ n: 1 }, { n: 2 }]))._unsafeUnwrap();
    const send = otel.spans().find((s) => s.name === 'send t');
    expect(send?.attributes['messaging.batch.message_count']).toBe(2);
    const jobs = (await queue.claim({ batch: 2 }))._unsafeUnwrap();
    expect(jobs.map((j) => j.traceContext?.traceparent)).toEqual([
      `00-${send?.spanContext().traceId}-${send?.spanContext().spanId}-01`,
      `00-${send?.spanContext().traceId}-${send?.spanContext().spanId}-01`,
    ]);
  });

  it("a schedule's tick job carries the trace context of the pass that enqueued it", async () => {
    const queue = new Queue({
      pool,
      txManager: new TxManager(pool),
      schema: 'otel_q3',
      tasks: { t: z.object({}) },
      schedules: { hourly: { every: '1h', task: 't', missed: 'once', grace: '1d' } },
    });
    (await queue.migrate())._unsafeUnwrap();
    (await queue.fireSchedules())._unsafeUnwrap();
    await setNextRun(pool, 'otel_q3', 'hourly', new Date(Date.now() - 3_600_000));
    otel.reset();
    const pass = (await queue.fireSchedules())._unsafeUnwrap();
    expect(pass.fired.length).toBeGreaterThan(0);
    // One producer span for the ticks a pass fires of one schedule (as for an enqueueMany).
    const sends = otel.spans().filter((s) => s.name === 'send t');
    expect(sends).toHaveLength(1);
    const send = sends[0];
    expect(send?.kind).toBe(api.SpanKind.PRODUCER);
    const jobs = (await queue.claim({ batch: 10 }))._unsafeUnwrap();
    expect(jobs.map((j) => j.id).sort()).toEqual(pass.fired.map((f) => f.jobId).sort());
    for (const job of jobs)
      expect(job.traceContext?.traceparent).toBe(
        `00-${send?.spanContext().traceId}-${send?.spanContext().spanId}-01`,
      );
  });
});
