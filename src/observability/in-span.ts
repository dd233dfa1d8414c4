import type { OpenTelemetryApi, OtelAttributes, OtelSpan } from './otel-api.js';
import { failSpan } from './span-kind.js';

/**
 * Runs `fn` in a span of the `pg-txkit` tracer, a child of the active context, made the active span
 * for `fn` (spans started inside nest under it). `settle` describes the outcome on the span (return
 * an error to mark it failed); a rejection marks it failed and is rethrown. Without an API, or when
 * nothing records, only `fn` runs.
 *
 * @example
 * const rows = await inSpan(api, 'migrate jobs', SpanKind.INTERNAL, attributes, () => migrate(), () => undefined);
 */
export async function inSpan<T>(
  api: OpenTelemetryApi | undefined,
  name: string,
  kind: number,
  attributes: OtelAttributes,
  fn: () => Promise<T>,
  settle: (value: T, span: OtelSpan) => unknown,
): Promise<T> {
  if (api === undefined) return fn();
  const span = api.trace.getTracer('pg-txkit').startSpan(name, { kind, attributes });
  if (!span.isRecording()) {
    span.end();
    return fn();
  }
  try {
    const value = await api.context.with(api.trace.setSpan(api.context.active(), span), fn);
    const error = settle(value, span);
    if (error !== undefined) failSpan(span, error);
    return value;
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}
