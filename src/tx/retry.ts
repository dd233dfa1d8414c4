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
  /** Milliseconds the whole call may take (p-retry's `maxRetryTime`); no retry starts that would end after it. */
  readonly deadlineMs?: number | undefined;
  /** Stops retrying (p-retry's `signal`): checked before each attempt, and wakes a wait early. */
  readonly signal?: AbortSignal | undefined;
  /** Random source for the jitter (tests pin it). */
  readonly random?: (() => number) | undefined;
  /** Called (and awaited) before each wait, with the delay about to be slept. */
  readonly onRetry?: ((attempt: number, failure: TxKitError, delayMs: number) => unknown) | undefined;
}

/** Thrown into p-retry to ask for another attempt; carries the failure. */
class RetryRequest extends Error {
  readonly failure: TxKitError;
  constructor(failure: TxKitError) {
    super(failure.message);
    this.failure = failure;
  }
}

/** Sleeps `ms`, or less when `signal` aborts first; resolves false when aborted. */
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
 * THE retry engine of pg-txkit (transactions, safeDdl; offered to migrations and reconnects). p-retry
 * runs the loop — `retries`, `signal`, `maxRetryTime` as the deadline, `shouldRetry` — and the delay
 * between attempts is computed in one place, {@link fullJitterDelay}, and slept inside `shouldRetry`
 * (p-retry's own exponential delay is set to zero: its formula has no full jitter).
 *
 * The first attempt runs before p-retry is entered (the common case: no retry, no loop set-up).
 * `attempt(n)` (n = 1, 2, …) decides what is retryable — normally with {@link isRetryable} — and
 * returns `{ done: false, failure }` only for failures worth another run. Ends with
 * {@link RetriesExhausted} (the history of kinds, codes and delays) when the attempts are used up, when
 * the next wait would cross the deadline, or when the signal aborts. An attempt that finished is never
 * thrown away because the signal aborted after it.
 *
 * @example
 * const result = await withRetry(async (n) => (n < 3 ? { done: false, failure: new SerializationFailure() } : { done: true, value: n }), {
 *   maxAttempts: 5, backoff: { baseMs: 10, capMs: 1000 },
 * });
 * // ok(3)
 */
export async function withRetry<V>(
  attempt: (n: number) => Promise<AttemptOutcome<V>>,
  policy: RetryPolicy,
): Promise<Result<V, RetriesExhausted>> {
  const history: AttemptRecord[] = [];
  const startedAt = performance.now();
  let why = 'attempts used up';
  let attempts = 0;
  let finished: { readonly value: V } | undefined;
  let lastFailure: TxKitError | undefined;
  const record = (n: number, failure: TxKitError, delayMs: number): void => {
    const code = (failure as { code?: unknown }).code;
    history.push({
      attempt: n,
      kind: failure.kind,
      code: typeof code === 'string' ? code : undefined,
      delayMs,
    });
  };
  // Fast path: the first attempt runs before p-retry is entered (most transactions never retry, and
  // p-retry's set-up costs a few microseconds per call); its failure enters the loop as attempt 1.
  const first = await attempt(1);
  if (first.done) return ok(first.value);
  lastFailure = first.failure;
  try {
    const value = await pRetry(
      async (n: number) => {
        attempts = n;
        if (n === 1) throw new RetryRequest(first.failure);
        const outcome = await attempt(n);
        if (outcome.done) {
          finished = { value: outcome.value };
          return outcome.value;
        }
        lastFailure = outcome.failure;
        throw new RetryRequest(outcome.failure);
      },
      {
        retries: policy.maxAttempts - 1,
        minTimeout: 0,
        maxTimeout: 0,
        factor: 1,
        ...(policy.deadlineMs === undefined ? {} : { maxRetryTime: policy.deadlineMs }),
        ...(policy.signal === undefined ? {} : { signal: policy.signal }),
        shouldRetry: async ({ error, attemptNumber }) => {
          if (!(error instanceof RetryRequest)) return false;
          const delayMs = fullJitterDelay(attemptNumber, policy.backoff, policy.random);
          if (policy.signal?.aborted) {
            why = 'aborted';
            return false;
          }
          if (
            policy.deadlineMs !== undefined &&
            performance.now() - startedAt + delayMs >= policy.deadlineMs
          ) {
            why = 'deadline reached';
            return false;
          }
          record(attemptNumber, error.failure, delayMs);
          await policy.onRetry?.(attemptNumber, error.failure, delayMs);
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
    // p-retry checks the signal after a successful attempt too: a finished attempt (a COMMIT that
    // happened) is reported as such, never as aborted.
    if (finished !== undefined) return ok(finished.value);
    if (lastFailure === undefined) throw error; // the signal aborted before any attempt, or a defect
    if (!(error instanceof RetryRequest)) {
      if (policy.signal?.aborted && error === policy.signal.reason) why = 'aborted';
      else throw error;
    } else if (policy.deadlineMs !== undefined && performance.now() - startedAt >= policy.deadlineMs) {
      why = why === 'attempts used up' ? 'deadline reached' : why;
    }
    if (history.at(-1)?.attempt !== attempts) record(attempts, lastFailure, 0);
    return err(new RetriesExhausted(attempts, history, lastFailure, why));
  }
}
