/** OpenTelemetry's SpanKind values (stable numbers of the API). */
export const SpanKind = { INTERNAL: 0, SERVER: 1, CLIENT: 2, PRODUCER: 3, CONSUMER: 4 } as const;
/** OpenTelemetry's SpanStatusCode values. */
export const SpanStatus = { UNSET: 0, OK: 1, ERROR: 2 } as const;

/**
 * The `error.type` of a failure: a pg-txkit error's kind, else the error's name.
 *
 * @example
 * errorType(new SerializationFailure()); // 'SerializationFailure'
 */
export function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const { kind, name } = error as { kind?: unknown; name?: unknown };
    if (typeof kind === 'string') return kind;
    if (typeof name === 'string') return name;
  }
  return '_OTHER';
}

/**
 * Marks `span` failed with `error` (status ERROR, `error.type`, the exception event).
 *
 * @example
 * failSpan(span, new Error('boom'));
 */
export function failSpan(
  span: {
    setStatus(s: { code: number; message?: string }): unknown;
    setAttribute(k: string, v: string): unknown;
    recordException(e: Error | string): unknown;
  },
  error: unknown,
): void {
  const type = errorType(error);
  span.setAttribute('error.type', type);
  const message = error instanceof Error ? error.message : String(error);
  span.setStatus({ code: SpanStatus.ERROR, message });
  if (error instanceof Error) span.recordException(error);
}
