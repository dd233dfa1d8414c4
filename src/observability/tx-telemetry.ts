import { dbAttributes } from './db-attributes.js';
import type { OpenTelemetryApi, OtelAttributes, OtelContext, OtelSpan, OtelTracer } from './otel-api.js';
import { errorType, failSpan, SpanKind, SpanStatus } from './span-kind.js';

/** What {@link TxManager.metrics} reports: counters of this manager since it was created (exact, in process). */
export interface TxMetrics {
  /** Outermost transactions (`do()` calls that began one) that ended. */
  readonly transactions: number;
  /** Of those, the ones that committed. */
  readonly committed: number;
  /** Attempts run (a retried transaction counts each). */
  readonly attempts: number;
  /** Retries by the error kind of the attempt that failed (`SerializationFailure`, `DeadlockDetected` …). */
  readonly retries: Readonly<Record<string, number>>;
  /** Transactions that did not commit, by what they returned or raised (`RetriesExhausted`, a domain error's kind …). */
  readonly failures: Readonly<Record<string, number>>;
}

/** The settings of a transaction the telemetry reads. */
interface TxSettingsView {
  readonly name?: string | undefined;
  readonly isolation: string;
  readonly readOnly?: boolean | undefined;
}

/** How an attempt ended, as the telemetry sees it. */
type AttemptEndView =
  | { readonly type: 'committed' }
  | { readonly type: 'err'; readonly error: unknown }
  | { readonly type: 'failure'; readonly failure: { readonly kind: string } }
  | { readonly type: 'defect'; readonly error: unknown };

/** The attributes of a committed attempt or transaction (one object, never changed). */
const COMMITTED: OtelAttributes = Object.freeze({ 'pg_txkit.tx.outcome': 'committed' });

function bump(map: Record<string, number>, key: string): void {
  map[key] = (map[key] ?? 0) + 1;
}

/** One outermost transaction's span and its attempts' child spans. */
export class TxCall {
  readonly #api: OpenTelemetryApi;
  readonly #tracer: OtelTracer;
  readonly #span: OtelSpan;
  readonly #context: OtelContext;
  readonly #attributes: OtelAttributes;
  #attempts = 0;

  constructor(api: OpenTelemetryApi, tracer: OtelTracer, span: OtelSpan, attributes: OtelAttributes) {
    this.#api = api;
    this.#tracer = tracer;
    this.#span = span;
    this.#attributes = attributes;
    this.#context = api.trace.setSpan(api.context.active(), span);
  }

  /** Runs attempt `n` in a child span (the callback's own spans, pg's included, nest under it). */
  async attempt<E extends AttemptEndView>(n: number, run: () => Promise<E>): Promise<E> {
    this.#attempts = n;
    const span = this.#tracer.startSpan(
      'transaction.attempt',
      { kind: SpanKind.INTERNAL, attributes: { ...this.#attributes, 'pg_txkit.tx.attempt': n } },
      this.#context,
    );
    try {
      const end = await this.#api.context.with(this.#api.trace.setSpan(this.#context, span), run);
      span.setAttribute('pg_txkit.tx.outcome', end.type);
      if (end.type === 'failure') failSpan(span, end.failure);
      else if (end.type === 'defect') failSpan(span, end.error);
      else if (end.type === 'err') span.setAttribute('error.type', errorType(end.error));
      return end;
    } catch (error) {
      failSpan(span, error);
      throw error;
    } finally {
      span.end();
    }
  }

  /** The attempt failed with a retryable kind: the next one starts after `delayMs`. */
  retried(attempt: number, kind: string, delayMs: number): void {
    this.#span.addEvent('retry', {
      'pg_txkit.tx.attempt': attempt,
      'error.type': kind,
      'pg_txkit.tx.retry_delay_ms': Math.round(delayMs),
    });
  }

  /** Ends the transaction's span with its outcome. */
  end(outcome: { committed: true } | { committed: false; error: unknown }): void {
    this.#span.setAttribute('pg_txkit.tx.attempts', this.#attempts);
    if (outcome.committed) this.#span.setStatus({ code: SpanStatus.UNSET });
    else failSpan(this.#span, outcome.error);
    this.#span.end();
  }
}

/**
 * A TxManager's telemetry: exact in-process counters (the {@link TxMetrics} snapshot), and with
 * OpenTelemetry present a span per outermost transaction (`transaction <name>`) with a child span per
 * attempt (`transaction.attempt`: attempt number, outcome, `error.type`), a `retry` event per retry
 * (the failed kind, the delay), and the counters `pg_txkit.tx.attempts` / `pg_txkit.tx.retries` and
 * the histogram `pg_txkit.tx.duration`. Without OpenTelemetry, or with no SDK recording, no span is
 * created beyond the API's no-op one.
 *
 * @example
 * const telemetry = new TxTelemetry(resolveOpenTelemetry(undefined), pool.options);
 */
export class TxTelemetry {
  readonly #api: OpenTelemetryApi | undefined;
  readonly #tracer: OtelTracer | undefined;
  readonly #base: OtelAttributes;
  readonly #counters = { transactions: 0, committed: 0, attempts: 0 };
  /**
   * The span name and options of each settings object (the manager reuses one per call site): built
   * once, so a call whose span nobody records allocates nothing for it.
   */
  readonly #described = new WeakMap<
    TxSettingsView,
    { readonly name: string; readonly options: { kind: number; attributes: OtelAttributes } }
  >();
  readonly #retries: Record<string, number> = {};
  readonly #failures: Record<string, number> = {};
  readonly #otel:
    | {
        readonly attempts: { add(v: number, a?: OtelAttributes): void };
        readonly retries: { add(v: number, a?: OtelAttributes): void };
        readonly duration: { record(v: number, a?: OtelAttributes): void };
      }
    | undefined;

  constructor(api: OpenTelemetryApi | undefined, connection: object | undefined) {
    this.#api = api;
    this.#base = dbAttributes(connection);
    this.#tracer = api?.trace.getTracer('pg-txkit');
    const meter = api?.metrics.getMeter('pg-txkit');
    this.#otel =
      meter === undefined
        ? undefined
        : {
            attempts: meter.createCounter('pg_txkit.tx.attempts', {
              description: 'Transaction attempts, by outcome and error.type',
            }),
            retries: meter.createCounter('pg_txkit.tx.retries', {
              description: 'Transaction retries, by the error.type of the failed attempt',
            }),
            duration: meter.createHistogram('pg_txkit.tx.duration', {
              description: 'Outermost transaction duration, all attempts and delays included',
              unit: 's',
            }),
          };
  }

  /** The counters so far (a copy). */
  snapshot(): TxMetrics {
    return { ...this.#counters, retries: { ...this.#retries }, failures: { ...this.#failures } };
  }

  /** Starts a transaction's span; undefined when nothing records spans (then the call costs nothing more). */
  start(settings: TxSettingsView): TxCall | undefined {
    if (this.#tracer === undefined || this.#api === undefined) return undefined;
    let described = this.#described.get(settings);
    if (described === undefined) {
      const attributes: OtelAttributes = {
        ...this.#base,
        'pg_txkit.tx.isolation': settings.isolation,
        'pg_txkit.tx.read_only': settings.readOnly === true,
      };
      if (settings.name !== undefined) attributes['pg_txkit.tx.name'] = settings.name;
      const name = settings.name === undefined ? 'transaction' : `transaction ${settings.name}`;
      described = { name, options: { kind: SpanKind.INTERNAL, attributes } };
      this.#described.set(settings, described);
    }
    const span = this.#tracer.startSpan(described.name, described.options);
    if (!span.isRecording()) {
      span.end();
      return undefined;
    }
    return new TxCall(this.#api, this.#tracer, span, described.options.attributes);
  }

  /** An attempt ended. */
  attempted(end: AttemptEndView): void {
    this.#counters.attempts++;
    if (this.#otel === undefined) return;
    if (end.type === 'committed') {
      this.#otel.attempts.add(1, COMMITTED);
      return;
    }
    const kind = end.type === 'failure' ? end.failure.kind : errorType(end.error);
    this.#otel.attempts.add(1, { 'pg_txkit.tx.outcome': end.type, 'error.type': kind });
  }

  /** A retry of an attempt that failed with `kind`. */
  retried(kind: string): void {
    bump(this.#retries, kind);
    this.#otel?.retries.add(1, { 'error.type': kind });
  }

  /** An outermost transaction ended (committed, or with `error`), `startedAt` from performance.now(). */
  ended(outcome: { committed: true } | { committed: false; error: unknown }, startedAt: number): void {
    this.#counters.transactions++;
    if (outcome.committed) this.#counters.committed++;
    else bump(this.#failures, errorType(outcome.error));
    if (this.#otel === undefined) return;
    this.#otel.duration.record(
      (performance.now() - startedAt) / 1000,
      outcome.committed
        ? COMMITTED
        : { 'pg_txkit.tx.outcome': 'failed', 'error.type': errorType(outcome.error) },
    );
  }
}
