// A namespace import: a bundle whose banner declares its own `createRequire` (the usual ESM banner for
// CommonJS dependencies) would clash with a named one.
import * as nodeModule from 'node:module';
import { z } from 'zod/v4';

/** Attribute values as OpenTelemetry takes them. */
export type OtelAttributes = Record<string, string | number | boolean | undefined>;

/** An OpenTelemetry context (opaque). */
export type OtelContext = object;

/** The identity of a span (what a link points to). */
export interface OtelSpanContext {
  readonly traceId: string;
  readonly spanId: string;
  readonly traceFlags: number;
}

/** The part of an OpenTelemetry `Span` pg-txkit uses. */
export interface OtelSpan {
  setAttribute(key: string, value: string | number | boolean): unknown;
  addEvent(name: string, attributes?: OtelAttributes): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: Error | string): unknown;
  isRecording(): boolean;
  spanContext(): OtelSpanContext;
  end(): void;
}

/** The part of an OpenTelemetry `Tracer` pg-txkit uses. */
export interface OtelTracer {
  startSpan(
    name: string,
    options?: {
      kind?: number;
      attributes?: OtelAttributes;
      links?: { context: OtelSpanContext; attributes?: OtelAttributes }[];
      root?: boolean;
    },
    context?: OtelContext,
  ): OtelSpan;
}

/** The observer an observable instrument's callback gets. */
export interface OtelObservableResult {
  observe(value: number, attributes?: OtelAttributes): void;
}

/** An observable gauge or counter. */
export interface OtelObservable {
  addCallback(callback: (result: OtelObservableResult) => void | Promise<void>): void;
  removeCallback(callback: (result: OtelObservableResult) => void | Promise<void>): void;
}

/** The part of an OpenTelemetry `Meter` pg-txkit uses. */
export interface OtelMeter {
  createCounter(
    name: string,
    options?: { description?: string; unit?: string },
  ): {
    add(value: number, attributes?: OtelAttributes): void;
  };
  createHistogram(
    name: string,
    options?: { description?: string; unit?: string },
  ): {
    record(value: number, attributes?: OtelAttributes): void;
  };
  createObservableGauge(name: string, options?: { description?: string; unit?: string }): OtelObservable;
  addBatchObservableCallback(callback: OtelBatchCallback, observables: OtelObservable[]): void;
  removeBatchObservableCallback(callback: OtelBatchCallback, observables: OtelObservable[]): void;
}

/** A callback observing several instruments at once (one query for all of them). */
export type OtelBatchCallback = (observer: {
  observe(observable: OtelObservable, value: number, attributes?: OtelAttributes): void;
}) => void | Promise<void>;

/**
 * The part of the `@opentelemetry/api` module pg-txkit uses, as a structural type: the package stays an
 * optional peer (nothing of it is imported statically; a consumer without it loads pg-txkit as before).
 * Pass the module itself where detection cannot work (a bundle): `telemetry: otel` after
 * `import * as otel from '@opentelemetry/api'`.
 *
 * @example
 * import * as otel from '@opentelemetry/api';
 * const tm = new TxManager(pool, { telemetry: otel });
 */
export interface OpenTelemetryApi {
  /** `otel.trace`: tracers (a span per transaction, attempt, job, lock wait) and the active span. */
  readonly trace: {
    getTracer(name: string, version?: string): OtelTracer;
    setSpan(context: OtelContext, span: OtelSpan): OtelContext;
    getSpanContext(context: OtelContext): OtelSpanContext | undefined;
  };
  /** `otel.context`: the active context, so spans nest under the caller's. */
  readonly context: {
    active(): OtelContext;
    with<T>(context: OtelContext, fn: () => T): T;
  };
  /** `otel.propagation`: the trace context stored with a job and restored when it runs. */
  readonly propagation: {
    inject(context: OtelContext, carrier: Record<string, string>): void;
    extract(context: OtelContext, carrier: Record<string, string>): OtelContext;
  };
  /** `otel.metrics`: meters (attempts, retries, jobs, queue depth). */
  readonly metrics: {
    getMeter(name: string, version?: string): OtelMeter;
  };
}

/** The `telemetry` option: the API module, `false` for none, or undefined to find an installed one. */
export type TelemetryOption = OpenTelemetryApi | false | undefined;

function isApi(value: unknown): value is OpenTelemetryApi {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, { [k: string]: unknown } | undefined>;
  return (
    typeof v.trace?.getTracer === 'function' &&
    typeof v.context?.with === 'function' &&
    typeof v.propagation?.inject === 'function' &&
    typeof v.metrics?.getMeter === 'function'
  );
}

/**
 * The OpenTelemetry API to use: the one passed, none for `false`, else `@opentelemetry/api` when the
 * application has it installed (resolved synchronously from this module's location; every copy of the
 * API shares the global providers the application registered). Absent, or not resolvable (a bundle
 * without node_modules), it is undefined: telemetry is off and costs nothing.
 *
 * @example
 * const api = resolveOpenTelemetry(options.telemetry);
 */
export function resolveOpenTelemetry(option: unknown): OpenTelemetryApi | undefined {
  if (option === false) return undefined;
  if (option !== undefined) return isApi(option) ? option : undefined;
  try {
    const found: unknown = nodeModule.createRequire(import.meta.url)('@opentelemetry/api');
    return isApi(found) ? found : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The `telemetry` option's check: false, or an object with the API's trace/context/propagation/metrics.
 *
 * @example
 * isTelemetryOption(false); // true
 */
export function isTelemetryOption(value: unknown): value is TelemetryOption {
  return value === undefined || value === false || isApi(value);
}

/** The `telemetry` option's schema (the same in every options object that takes one). */
export const telemetrySchema = z.custom<TelemetryOption>(
  isTelemetryOption,
  'the @opentelemetry/api module, or false',
);
