import { err, ok, type Result } from 'neverthrow';
import pRetry from 'p-retry';
import { type AttemptRecord, RetriesExhausted, type TxKitError } from '../errors/index.js';
import { type Backoff, fullJitterDelay } from './backoff.js';

/** What one attempt produced: a final value, or a failure that may be retried. */
export type AttemptOutcome<V> =
  | { readonly done: true; readonly value: V }
  | { readonly done: false; readonly failure: TxKitError };

/** How {@link withRetry} retries. */
export interface RetryPolicy {
  /** Total attempts allowed (≥ 1). */
  readonly maxAttempts: number;
  /** Full-jitter backoff between attempts. */
  readonly backoff: Backoff;
  /** Milliseconds the whole call may take, counted from `startedAt`; no retry starts that would end after it. */
  readonly deadlineMs?: number | undefined;
  /** `performance.now()` when the call started. */
  readonly startedAt: number;
  /** Stops retrying (checked before each wait, and wakes a wait early). */
  readonly signal?: AbortSignal | undefined;
  /** Random source for the jitter (tests pin it). */
  readonly random?: (() => number) | undefined;
  /** Called before each wait. */
  readonly onRetry?: ((attempt: number, failure: TxKitError, delayMs: number) => void) | undefined;
}

/** Thrown into p-retry to ask for another attempt; carries the failure. */
class RetryRequest extends Error {
  readonly failure: TxKitError;
  constructor(failure: TxKitError) {
    super(failure.message);
    this.failure = failure;
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs `attempt(n)` (n = 1, 2, …) until it is done, with p-retry driving the loop and a full-jitter
 * delay between attempts. Stops with {@link RetriesExhausted} — carrying the history of kinds, codes
 * and delays — when the attempts are used up, when the next wait would cross the deadline, or when
 * the signal aborts. `attempt` decides what is retryable: it returns `{ done: false, failure }` only
 * for failures worth another run.
 *
 * @example
 * const result = await withRetry(async (n) => (n < 3 ? { done: false, failure: new SerializationFailure() } : { done: true, value: n }), {
 *   maxAttempts: 5, backoff: { baseMs: 10, capMs: 1000 }, startedAt: performance.now(),
 * });
 * // ok(3)
 */
export async function withRetry<V>(
  attempt: (n: number) => Promise<AttemptOutcome<V>>,
  policy: RetryPolicy,
): Promise<Result<V, RetriesExhausted>> {
  const history: AttemptRecord[] = [];
  let why = 'attempts used up';
  let attempts = 0;
  const record = (n: number, failure: TxKitError, delayMs: number): void => {
    const code = (failure as { code?: unknown }).code;
    history.push({
      attempt: n,
      kind: failure.kind,
      code: typeof code === 'string' ? code : undefined,
      delayMs,
    });
  };
  // Fast path: the first attempt runs outside p-retry (most transactions never retry, and p-retry's
  // machinery costs a few microseconds per call); its failure enters the loop below as attempt 1.
  const first = await attempt(1);
  if (first.done) return ok(first.value);
  attempts = 1;
  try {
    const value = await pRetry(
      async (n: number) => {
        attempts = n;
        if (n === 1) throw new RetryRequest(first.failure);
        const outcome = await attempt(n);
        if (outcome.done) return outcome.value;
        throw new RetryRequest(outcome.failure);
      },
      {
        retries: policy.maxAttempts - 1,
        // Delays are computed here (full jitter), not by p-retry's exponential formula.
        minTimeout: 0,
        maxTimeout: 0,
        factor: 1,
        shouldRetry: async ({ error, attemptNumber }) => {
          if (!(error instanceof RetryRequest)) return false;
          const delayMs = fullJitterDelay(attemptNumber, policy.backoff, policy.random);
          if (policy.signal?.aborted) {
            why = 'aborted';
            return false;
          }
          if (
            policy.deadlineMs !== undefined &&
            performance.now() - policy.startedAt + delayMs >= policy.deadlineMs
          ) {
            why = 'deadline reached';
            return false;
          }
          record(attemptNumber, error.failure, delayMs);
          policy.onRetry?.(attemptNumber, error.failure, delayMs);
          if (!(await sleep(delayMs, policy.signal))) {
            why = 'aborted';
            return false;
          }
          return true;
        },
      },
    );
    return ok(value);
  } catch (error) {
    if (!(error instanceof RetryRequest)) throw error;
    if (history.at(-1)?.attempt !== attempts) record(attempts, error.failure, 0);
    return err(new RetriesExhausted(attempts, history, error.failure, why));
  }
}
