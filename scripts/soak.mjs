#!/usr/bin/env node
// `npm run soak` (not part of CI): the mixed-workload reliability harness of test/reliability at large
// scale — by default 1,000,000 transactions and 1,000,000 queue jobs under faults (terminated backends,
// dropped and stalled connections, SIGKILLed workers, a server restart every few minutes, statement
// timeouts) — recording the RSS of every worker over time. Runs the BUILT package (dist/): build first.
//
// Sizes: SOAK_TRANSACTIONS, SOAK_JOBS, SOAK_WORKERS, SOAK_WARMUP_MS, SOAK_MAX_MS, SOAK_RESTART_EVERY_MS,
// SOAK_OUT (output directory, default soak-results), plus any RELIABILITY_* variable of the harness.
// Writes <out>/soak-<timestamp>.json (options, figures, anomalies, every RSS sample) and .csv (samples).
// Exit code 1 when an anomaly was found (a lost or duplicated job or effect, a leak) or when the RSS of
// the uninterrupted worker grew by more than SOAK_MAX_RSS_GROWTH_MB (default 50) after warm-up.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startPostgres } from '../dist/testing/index.js';
import { optionsFromEnv, runMixedWorkload } from '../test/reliability/harness/mixed-workload.mjs';

const num = (name, fallback) => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw.replaceAll('_', ''));
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name}=${raw}: expected a number ≥ 0`);
  return value;
};
const transactions = num('SOAK_TRANSACTIONS', 1_000_000);
const jobs = num('SOAK_JOBS', 1_000_000);
const warmupMs = num('SOAK_WARMUP_MS', 60_000);
const maxGrowthMb = num('SOAK_MAX_RSS_GROWTH_MB', 50);
const maxMs = num('SOAK_MAX_MS', 24 * 3_600_000);
const restartEveryMs = num('SOAK_RESTART_EVERY_MS', 180_000);
const out = process.env.SOAK_OUT ?? 'soak-results';

let unhandled = 0;
process.on('unhandledRejection', (reason) => {
  unhandled++;
  console.error('soak: unhandled rejection in the harness:', reason);
});

const mb = (bytes) => Math.round((bytes / 1_048_576) * 10) / 10;
const postgres = await startPostgres({ provider: 'embedded' });
console.log(`soak: PostgreSQL ${postgres.version}; ${transactions} transactions, ${jobs} jobs, faults on`);
let result;
try {
  result = await runMixedWorkload({
    postgres,
    log: (line) => console.log(line),
    ...optionsFromEnv({
      workers: num('SOAK_WORKERS', 4),
      transactions,
      jobs,
      durationMs: maxMs,
      drainTimeoutMs: 30 * 60_000,
      restarts: Math.max(1, Math.floor(maxMs / restartEveryMs)),
      restartEveryMs,
      faultMinMs: 1_000,
      faultMaxMs: 3_000,
      accounts: 200,
      rooms: 20,
      bookingHours: 2_000,
      paymentKeys: Math.max(1_000, Math.ceil(transactions / 10)),
      singleRunKeys: Math.max(1_000, Math.ceil(transactions / 20)),
      spareSlot0: true, // one worker is never SIGKILLed: its RSS series covers the whole run
      // a million transactions' journal is hundreds of MB, read and checked in memory at the end:
      // RELIABILITY_HISTORY=1 turns it on (the reliability suite always checks its history)
      history: false,
      sampleEveryMs: 5_000,
    }),
  });
} finally {
  await postgres.stop();
}

// RSS per process (pid): first sample, first sample after warm-up, last, max after warm-up.
const byPid = new Map();
for (const s of result.rssSamples) {
  const series = byPid.get(s.pid) ?? { slot: s.slot, samples: [] };
  series.samples.push(s);
  byPid.set(s.pid, series);
}
const processes = [];
for (const [pid, { slot, samples }] of byPid) {
  const first = samples[0];
  const last = samples.at(-1);
  const lifetime = last.t - first.t;
  const afterWarmup = samples.find((s) => s.t - first.t >= warmupMs);
  const maxAfter = afterWarmup
    ? Math.max(...samples.filter((s) => s.t >= afterWarmup.t).map((s) => s.rss))
    : null;
  processes.push({
    slot,
    pid,
    lifetimeMs: lifetime,
    samples: samples.length,
    rssStartMb: mb(first.rss),
    rssAfterWarmupMb: afterWarmup ? mb(afterWarmup.rss) : null,
    rssEndMb: mb(last.rss),
    rssMaxAfterWarmupMb: maxAfter === null ? null : mb(maxAfter),
    growthAfterWarmupMb: afterWarmup ? mb(last.rss - afterWarmup.rss) : null,
  });
}
processes.sort((a, b) => b.lifetimeMs - a.lifetimeMs);
const spare = processes.find((p) => p.slot === 0);
const anomalies = [...result.anomalies];
if (unhandled) anomalies.push(`${unhandled} unhandled rejection(s) in the harness`);
if (spare?.growthAfterWarmupMb != null && spare.growthAfterWarmupMb > maxGrowthMb) {
  anomalies.push(`worker 0 RSS grew ${spare.growthAfterWarmupMb} MB after warm-up (limit ${maxGrowthMb} MB)`);
}
const jobAnomalies = result.anomalies.filter((a) => /job|queue/i.test(a));

await mkdir(out, { recursive: true });
const stamp = new Date().toISOString().replaceAll(':', '-').replace(/\..*/, '');
const { rssSamples, ...figures } = result;
const file = join(out, `soak-${stamp}`);
await writeFile(
  `${file}.json`,
  `${JSON.stringify({ postgres: postgres.version, warmupMs, figures, processes, anomalies, rssSamples }, null, 2)}\n`,
);
await writeFile(
  `${file}.csv`,
  `t_ms,slot,pid,rss_bytes,heap_used_bytes\n${rssSamples.map((s) => `${s.t},${s.slot},${s.pid},${s.rss},${s.heapUsed ?? ''}`).join('\n')}\n`,
);

console.log(result.summary);
console.log(
  `soak: ${result.operations} transactions, ${result.jobs.done + result.jobs.dead} jobs (${result.jobs.done} done, ` +
    `${result.jobs.dead} dead) in ${Math.round(result.totalMs / 1000)} s; lost or duplicated jobs: ${jobAnomalies.length}`,
);
for (const p of processes.filter((q) => q.rssAfterWarmupMb !== null)) {
  console.log(
    `soak: ${p.slot === 'harness' ? 'harness' : `worker ${p.slot}`} pid ${p.pid} (${Math.round(p.lifetimeMs / 1000)} s): RSS ` +
      `start ${p.rssStartMb} MB, after warm-up ${p.rssAfterWarmupMb} MB, end ${p.rssEndMb} MB, ` +
      `max after warm-up ${p.rssMaxAfterWarmupMb} MB, growth after warm-up ${p.growthAfterWarmupMb} MB`,
  );
}
console.log(`soak: anomalies found = ${anomalies.length}; samples in ${file}.json and ${file}.csv`);
for (const a of anomalies) console.log(`  anomaly: ${a}`);
process.exitCode = anomalies.length === 0 ? 0 : 1;
