import { dbAttributes } from './db-attributes.js';
import type {
  OpenTelemetryApi,
  OtelAttributes,
  OtelBatchCallback,
  OtelSpan,
  OtelSpanContext,
  OtelTracer,
} from './otel-api.js';
import { errorType, failSpan, SpanKind } from './span-kind.js';

/** What the queue's gauges show, read from `queue.metrics()`. */
export interface GaugeReading {
  readonly counts: Readonly<Record<string, number>>;
  readonly oldestReadyMs: number;
  readonly deadTuples: number;
}

/** A job as the processing span reads it. */
interface JobView {
  readonly id: string;
  readonly task: string;
  readonly attempts: number;
  readonly traceContext: Readonly<Record<string, string>> | null;
}

/** An enqueue's span: its trace context goes into the job (`carrier`); ended with the job's id. */
export class QueueSend {
  readonly #span: OtelSpan;
  /** The propagator's fields (W3C: traceparent, tracestate) of the send span, stored with the job. */
  readonly carrier: Record<string, string> | null;

  constructor(span: OtelSpan, carrier: Record<string, string>) {
    this.#span = span;
    this.carrier = Object.keys(carrier).length > 0 ? carrier : null;
  }

  /** Ends the span with the enqueue's outcome. */
  end(outcome: { ids: readonly string[] } | { error: unknown }): void {
    if ('error' in outcome) failSpan(this.#span, outcome.error);
    else if (outcome.ids.length === 1 && outcome.ids[0] !== undefined) {
      this.#span.setAttribute('messaging.message.id', outcome.ids[0]);
    }
    this.#span.end();
  }
}

/** A job's processing span (one per attempt), linked to the span that enqueued it. */
export class QueueProcess {
  readonly #api: OpenTelemetryApi;
  readonly #span: OtelSpan;

  constructor(api: OpenTelemetryApi, span: OtelSpan) {
    this.#api = api;
    this.#span = span;
  }

  /** Runs the handler in the span's context: its own spans (a `ctx.transaction` included) nest under it. */
  run<T>(fn: () => T): T {
    return this.#api.context.with(this.#api.trace.setSpan(this.#api.context.active(), this.#span), fn);
  }

  /** Ends the span with the job's outcome (`completed`, `failed`, `dead`, `lost` …). */
  end(outcome: string, error?: unknown): void {
    this.#span.setAttribute('pg_txkit.job.outcome', outcome);
    if (error !== undefined) failSpan(this.#span, error);
    this.#span.end();
  }
}

/**
 * A queue's telemetry (with OpenTelemetry present): a PRODUCER span `send <task>` per enqueue whose
 * trace context is stored with the job, a CONSUMER span `process <task>` per attempt linked to it
 * (messaging semantic conventions: `messaging.system` = pg-txkit, `messaging.operation.type` =
 * send / process, `messaging.destination.name` = the task, `messaging.message.id`), and the counter
 * `pg_txkit.queue.jobs.processed` by task and outcome. Off (undefined spans, no counter) without it.
 *
 * @example
 * const telemetry = new QueueTelemetry(resolveOpenTelemetry(undefined), pool.options, 'pgtxkit_queue');
 */
export class QueueTelemetry {
  readonly #api: OpenTelemetryApi | undefined;
  readonly #tracer: OtelTracer | undefined;
  readonly #base: OtelAttributes;
  readonly #processed: { add(v: number, a?: OtelAttributes): void } | undefined;
  /** The OpenTelemetry API in use, if any. */
  readonly api: OpenTelemetryApi | undefined;
  /** Span names and attributes by operation and task (see #described). */
  readonly #spans = new Map<string, { name: string; attributes: OtelAttributes }>();
  /** Workers of this queue observing its gauges, and the registered callback while there are any. */
  #observers = 0;
  #unobserve: (() => void) | undefined;

  constructor(api: OpenTelemetryApi | undefined, connection: object | undefined, schema: string) {
    this.#api = api;
    this.api = api;
    this.#tracer = api?.trace.getTracer('pg-txkit');
    this.#base = {
      ...dbAttributes(connection),
      'messaging.system': 'pg-txkit',
      'pg_txkit.queue.schema': schema,
    };
    this.#processed = api?.metrics.getMeter('pg-txkit').createCounter('pg_txkit.queue.jobs.processed', {
      description:
        'Job runs ended, by task and outcome (completed, failed = retry scheduled, dead, lost, released)',
    });
  }

  /** Starts the span of an enqueue of `count` jobs of `task`; undefined when nothing records. */
  send(task: string, count: number): QueueSend | undefined {
    const api = this.#api;
    if (api === undefined || this.#tracer === undefined) return undefined;
    const { name, attributes } = this.#described('send', task);
    const span = this.#tracer.startSpan(name, { kind: SpanKind.PRODUCER, attributes });
    if (!span.isRecording()) {
      span.end();
      return undefined;
    }
    if (count !== 1) span.setAttribute('messaging.batch.message_count', count);
    const carrier: Record<string, string> = {};
    api.propagation.inject(api.trace.setSpan(api.context.active(), span), carrier);
    return new QueueSend(span, carrier);
  }

  /** Starts the processing span of one attempt of `job`, linked to its enqueuing span. */
  process(job: JobView): QueueProcess | undefined {
    const api = this.#api;
    if (api === undefined || this.#tracer === undefined) return undefined;
    const links: { context: OtelSpanContext }[] = [];
    if (job.traceContext !== null) {
      const extracted = api.propagation.extract(api.context.active(), { ...job.traceContext });
      const linked = api.trace.getSpanContext(extracted);
      if (linked !== undefined) links.push({ context: linked });
    }
    const { name, attributes } = this.#described('process', job.task);
    const span = this.#tracer.startSpan(name, { kind: SpanKind.CONSUMER, links, attributes });
    if (!span.isRecording()) {
      span.end();
      return undefined;
    }
    span.setAttribute('messaging.message.id', job.id);
    span.setAttribute('pg_txkit.job.attempt', job.attempts);
    return new QueueProcess(api, span);
  }

  /**
   * Registers the queue's gauges (`pg_txkit.queue.jobs` by state, `pg_txkit.queue.oldest_ready.age`,
   * `pg_txkit.queue.table.dead_tuples`), read with ONE metrics statement per collection, while at least
   * one worker of this queue runs. Returns the worker's release.
   */
  observe(read: () => Promise<GaugeReading | undefined>): () => void {
    const meter = this.#api?.metrics.getMeter('pg-txkit');
    if (meter === undefined) return () => {};
    if (this.#observers++ === 0) {
      const jobs = meter.createObservableGauge('pg_txkit.queue.jobs', {
        description:
          'Jobs by state (pending, ready, running, expired, dead); exact below the cap of queue.metrics()',
      });
      const age = meter.createObservableGauge('pg_txkit.queue.oldest_ready.age', {
        description: 'Age of the oldest job that could run now',
        unit: 's',
      });
      const dead = meter.createObservableGauge('pg_txkit.queue.table.dead_tuples', {
        description: 'Dead tuples of the jobs table (statistics estimate): vacuum backlog',
      });
      const schema = this.#base['pg_txkit.queue.schema'];
      const callback: OtelBatchCallback = async (observer) => {
        const m = await read();
        if (m === undefined) return;
        for (const [state, count] of Object.entries(m.counts)) {
          observer.observe(jobs, count, { 'pg_txkit.queue.schema': schema, 'pg_txkit.job.state': state });
        }
        observer.observe(age, m.oldestReadyMs / 1000, { 'pg_txkit.queue.schema': schema });
        observer.observe(dead, m.deadTuples, { 'pg_txkit.queue.schema': schema });
      };
      meter.addBatchObservableCallback(callback, [jobs, age, dead]);
      this.#unobserve = () => meter.removeBatchObservableCallback(callback, [jobs, age, dead]);
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.#observers === 0) {
        this.#unobserve?.();
        this.#unobserve = undefined;
      }
    };
  }

  /** The span name and attributes of an operation on a task: built once per task (hot path). */
  #described(operation: 'send' | 'process', task: string): { name: string; attributes: OtelAttributes } {
    const key = `${operation} ${task}`;
    let found = this.#spans.get(key);
    if (found === undefined) {
      found = {
        name: key,
        attributes: {
          ...this.#base,
          'messaging.operation.type': operation,
          'messaging.operation.name': operation,
          'messaging.destination.name': task,
        },
      };
      this.#spans.set(key, found);
    }
    return found;
  }

  /** A job's run ended with `outcome`. */
  processed(task: string, outcome: string, error?: unknown): void {
    this.#processed?.add(1, {
      'messaging.destination.name': task,
      'pg_txkit.job.outcome': outcome,
      ...(error === undefined ? {} : { 'error.type': errorType(error) }),
    });
  }
}
