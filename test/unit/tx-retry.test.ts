import { describe, expect, it } from 'vitest';
import { DeadlockDetected, LockNotAvailable, SerializationFailure } from '../../src/errors/index.js';
import { type AttemptOutcome, withRetry } from '../../src/tx/retry.js';

const policy = (over: Partial<Parameters<typeof withRetry>[1]> = {}) => ({
  maxAttempts: 5,
  backoff: { baseMs: 0, capMs: 0 },
  startedAt: performance.now(),
  random: () => 0,
  ...over,
});

describe('withRetry', () => {
  it('re-runs until the attempt is done and reports each retry', async () => {
    const seen: [number, string, number][] = [];
    const result = await withRetry(
      async (n): Promise<AttemptOutcome<string>> =>
        n < 3 ? { done: false, failure: new SerializationFailure() } : { done: true, value: `ok at ${n}` },
      policy({ onRetry: (attempt, failure, delayMs) => seen.push([attempt, failure.kind, delayMs]) }),
    );
    expect(result._unsafeUnwrap()).toBe('ok at 3');
    expect(seen).toEqual([
      [1, 'SerializationFailure', 0],
      [2, 'SerializationFailure', 0],
    ]);
  });

  it('gives RetriesExhausted with the history after maxAttempts', async () => {
    let calls = 0;
    const result = await withRetry(
      async (): Promise<AttemptOutcome<never>> => {
        calls++;
        return { done: false, failure: calls % 2 ? new DeadlockDetected() : new LockNotAvailable() };
      },
      policy({ maxAttempts: 3, backoff: { baseMs: 4, capMs: 8 }, random: () => 0.99 }),
    );
    const error = result._unsafeUnwrapErr();
    expect(calls).toBe(3);
    expect(error.attempts).toBe(3);
    expect(error.history).toEqual([
      { attempt: 1, kind: 'DeadlockDetected', code: '40P01', delayMs: 4 },
      { attempt: 2, kind: 'LockNotAvailable', code: '55P03', delayMs: 8 },
      { attempt: 3, kind: 'DeadlockDetected', code: '40P01', delayMs: 0 },
    ]);
    expect(error.last.kind).toBe('DeadlockDetected');
  });

  it('does not start a retry whose wait would cross the deadline', async () => {
    let calls = 0;
    const result = await withRetry(
      async (): Promise<AttemptOutcome<never>> => {
        calls++;
        return { done: false, failure: new SerializationFailure() };
      },
      policy({ deadlineMs: 50, backoff: { baseMs: 1000, capMs: 1000 }, random: () => 0.5 }),
    );
    expect(calls).toBe(1);
    expect(result._unsafeUnwrapErr().message).toMatch(/deadline/);
  });

  it('stops when the signal aborts, even in the middle of a wait', async () => {
    const controller = new AbortController();
    let calls = 0;
    const result = await withRetry(
      async (): Promise<AttemptOutcome<never>> => {
        calls++;
        return { done: false, failure: new SerializationFailure() };
      },
      policy({
        signal: controller.signal,
        backoff: { baseMs: 60_000, capMs: 60_000 },
        random: () => 1,
        onRetry: () => queueMicrotask(() => controller.abort()),
      }),
    );
    expect(calls).toBe(1);
    expect(result._unsafeUnwrapErr().message).toMatch(/aborted/);
  });

  it('lets a defect thrown by the attempt through unchanged', async () => {
    const bug = new TypeError('bug');
    await expect(
      withRetry(async () => {
        throw bug;
      }, policy()),
    ).rejects.toBe(bug);
  });
});
