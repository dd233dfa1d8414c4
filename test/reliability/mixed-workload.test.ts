import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { type StartedPostgres, startPostgres } from '../../src/testing/start-postgres.js';

// The mixed workload under faults (see harness/mixed-workload.mjs): 3 worker processes run transfers
// (lockRows and serializable), bookings, idempotent payments, singleRun and queue jobs while the
// harness terminates backends, drops and stalls connections, SIGKILLs workers, restarts the server and
// the workers hit statement timeouts. The run has its OWN server (startPostgres), so the restart does
// not disturb the other test files. Sizes: RELIABILITY_* environment variables (see DEFAULTS).
// The run records what its transfers, payments and singleRun reports read and wrote (every attempt,
// committed, rolled back or of unknown outcome) and checkHistory must find it serializable with session
// order; the naive control (the same workload, transfers without lockRows, SERIALIZABLE or retries)
// must be caught.
const DIST = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

let postgres: StartedPostgres | undefined;
afterAll(async () => {
  await postgres?.stop();
});

it('mixed workload under faults: money conserved, every effect exactly once, nothing leaked', {
  timeout: 240_000,
}, async () => {
  expect(existsSync(DIST), 'dist/index.js is missing: run `npm run build` first').toBe(true);
  const { optionsFromEnv, runMixedWorkload } = await import('./harness/mixed-workload.mjs');
  postgres = await startPostgres({ provider: 'embedded' });
  const result = await runMixedWorkload({ postgres, ...optionsFromEnv({ durationMs: 40_000, jobs: 3_000 }) });
  console.log(result.summary);
  expect(result.anomalies).toEqual([]);
  // The run really exercised what it claims: each fault kind and each operation kind happened.
  expect(Object.keys(result.faults).sort()).toEqual(
    expect.arrayContaining(['dropAll', 'restart', 'sigkill', 'stall', 'statementTimeout', 'terminate']),
  );
  for (const kind of [
    'transfer-lock',
    'transfer-serializable',
    'transfer-timeout',
    'booking',
    'payment',
    'singleRun',
  ]) {
    expect(result.opsByKind[kind] ?? 0, kind).toBeGreaterThan(0);
  }
  expect(result.outcomes.ok).toBeGreaterThan(0);
  expect(result.jobs.done).toBeGreaterThan(0);
  expect(result.jobs.dead).toBeGreaterThan(0);
  expect(result.unhandled).toBe(0);
  // The history: recorded, with attempts of every outcome, and serializable (else it is in anomalies).
  const history = result.history;
  expect(history?.valid).toBe(true);
  expect(history?.outcomes.commit).toBeGreaterThan(0);
  expect(history?.outcomes.abort).toBeGreaterThan(0);
  expect(history?.outcomes.unknown).toBeGreaterThan(0);
  expect(history?.dependencies).toBeGreaterThan(0);
});

it('the naive control: the same workload without lockRows, SERIALIZABLE or retries is caught by the history checker', {
  timeout: 120_000,
}, async () => {
  const { optionsFromEnv, runMixedWorkload } = await import('./harness/mixed-workload.mjs');
  postgres ??= await startPostgres({ provider: 'embedded' });
  const result = await runMixedWorkload({
    postgres,
    // 8 accounts: transfers meet on an account often, also on a loaded machine that runs few of them
    ...optionsFromEnv({ durationMs: 10_000, jobs: 300, accounts: 8 }),
    naive: true,
  });
  console.log(result.summary);
  expect(result.history?.valid).toBe(false);
  expect(result.history?.forbidden).toContain('lost-update');
  expect(result.anomalies.some((a) => a.startsWith('history not serializable: '))).toBe(true);
});
