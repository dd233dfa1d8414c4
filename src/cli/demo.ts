import { setMaxListeners } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { DdlAttempt } from '../diagnostics/safe-ddl.js';
import { type StartedPostgres, startPostgres } from '../testing/start-postgres.js';
import { createTestDatabase } from '../testing/test-database.js';
import { type CascadeObservation, createCascadeScenario } from './cascade-demo.js';
import type { CliIo } from './cli-io.js';
import { ConnectError, oneLine, UsageError } from './connection.js';
import { toJson } from './doctor.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { loadModules } from './load-modules.js';
import { ProgressBar } from './progress-bar.js';
import { renderLockReport } from './render-lock-report.js';
import { renderTable } from './render-table.js';
import type { Scenario, ScenarioResult } from './scenario.js';
import { stopServer } from './stop-server.js';
import { createStyle } from './style.js';

/** Options of the `demo` command. */
export interface DemoOptions {
  /** Server to use (a superuser or a role with CREATEDB); undefined starts one with startPostgres(). */
  readonly url: string | undefined;
  readonly clients: number;
  readonly scale: number;
  /** Scenario ids to run; undefined for all. */
  readonly only: readonly string[] | undefined;
  readonly json: boolean;
  /** Folder of scenario modules; default: `scenarios/` next to this file (dist/cli/scenarios). */
  readonly scenariosDir?: string | undefined;
}

/** One row of the demo's summary. */
export interface DemoRow {
  readonly id: string;
  readonly title: string;
  readonly pattern: string;
  readonly result: ScenarioResult | undefined;
  readonly error: string | undefined;
}

/** Does this value look like a Scenario (the contract of src/cli/scenario.ts)? */
function isScenario(value: unknown): value is Scenario {
  const s = value as Partial<Scenario> | null;
  return (
    typeof s === 'object' &&
    s !== null &&
    typeof s.id === 'string' &&
    typeof s.title === 'string' &&
    typeof s.pattern === 'string' &&
    typeof s.run === 'function'
  );
}

/**
 * Loads every scenario module of the folder (each exports `scenarios: Scenario[]`).
 *
 * @example
 * const { scenarios, problems } = await loadScenarios(dir);
 */
export async function loadScenarios(dir: string): Promise<{ scenarios: Scenario[]; problems: string[] }> {
  const typescript = import.meta.url.endsWith('.ts');
  const { items, problems } = await loadModules(
    dir,
    (mod) =>
      Array.isArray(mod.scenarios) && mod.scenarios.every(isScenario)
        ? (mod.scenarios as Scenario[])
        : undefined,
    { typescript },
  );
  return {
    scenarios: items.flatMap((i) => i.value),
    problems: problems.map((p) => `skipped ${p.file}: ${p.reason} (expected export: scenarios: Scenario[])`),
  };
}

/**
 * `pg-txkit demo`: runs every scenario (naive vs pattern) on a fresh database each, plus the live
 * lock-queue cascade (doctor's report of it, then safeDdl resolving it), and prints one summary table.
 * Exit 0 when every pattern row has 0 anomalies, 1 otherwise (or when a scenario failed).
 *
 * @example
 * const code = await runDemo({ url: undefined, clients: 16, scale: 1, only: undefined, json: false }, io);
 */
export async function runDemo(options: DemoOptions, io: CliIo): Promise<ExitCode> {
  const err = (line: string) => io.stderr.write(`${line}\n`);
  const dir = options.scenariosDir ?? fileURLToPath(new URL('./scenarios/', import.meta.url));
  const loaded = await loadScenarios(dir);
  for (const p of loaded.problems) err(`warning: ${p}`);
  let observation: CascadeObservation | undefined;
  const all = [...loaded.scenarios, createCascadeScenario((o) => (observation = o))];
  const seen = new Set<string>();
  const unique = all.filter((scenario) => {
    if (seen.has(scenario.id)) {
      err(`warning: duplicate scenario id ${scenario.id}; the first one is kept`);
      return false;
    }
    seen.add(scenario.id);
    return true;
  });
  if (options.only) {
    const unknown = options.only.filter((id) => !seen.has(id));
    if (unknown.length > 0) {
      throw new UsageError(
        `unknown scenario id(s) ${unknown.join(', ')}; available: ${[...seen].join(', ')}`,
      );
    }
  }
  const selected = options.only ? unique.filter((s) => options.only?.includes(s.id)) : unique;

  let server: StartedPostgres | undefined;
  let adminUrl: string;
  try {
    if (options.url === undefined)
      err('starting PostgreSQL (DATABASE_URL, a container, or the embedded server)…');
    server = await startPostgres(options.url === undefined ? {} : { provider: 'url', url: options.url });
    adminUrl = server.url;
    io.onServerStarted?.();
    err(`PostgreSQL ${server.version} (${server.provider})`);
  } catch (error) {
    throw new ConnectError(`cannot start or reach PostgreSQL: ${oneLine(error)}`);
  }
  const rows: DemoRow[] = [];
  try {
    for (const scenario of selected) {
      if (io.signal.aborted) break;
      const bar = new ProgressBar(io.stderr, scenario.id);
      // One listener per client on a shared signal is normal here (--clients 16 and more): no
      // MaxListenersExceededWarning for it.
      const scenarioSignal = AbortSignal.any([io.signal]);
      setMaxListeners(10_000, scenarioSignal);
      let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
      try {
        db = await createTestDatabase(adminUrl, { prefix: 'demo' });
        const result = await scenario.run({
          url: db.url,
          clients: options.clients,
          scale: options.scale,
          onProgress: (done, total) => bar.update(done, total),
          signal: scenarioSignal,
        });
        if (!isResult(result)) throw new Error('the scenario returned a malformed result');
        // A scenario may stop early on the signal and return what it did so far: the work it did not do
        // (daily-post's days never run) is not an anomaly of the pattern. Reported as interrupted, as a
        // scenario that throws on the signal is.
        if (io.signal.aborted) {
          bar.done('interrupted');
          break;
        }
        rows.push({ ...describe(scenario), result, error: undefined });
        bar.done(result.pattern.anomalies === 0 ? 'ok' : 'PATTERN ANOMALIES');
      } catch (error) {
        if (io.signal.aborted) {
          bar.done('interrupted');
          break;
        }
        rows.push({ ...describe(scenario), result: undefined, error: oneLine(error) });
        bar.done(`failed: ${oneLine(error)}`);
      } finally {
        await db?.drop().catch((e: unknown) => {
          // After a terminal Ctrl-C the embedded server got the signal too and is going away with it.
          if (!io.signal.aborted) err(`warning: could not drop ${db?.name}: ${oneLine(e)}`);
        });
      }
    }
  } finally {
    await stopServer(server);
  }

  const failed = rows.some((r) => r.error !== undefined || (r.result?.pattern.anomalies ?? 0) > 0);
  if (options.json) {
    io.stdout.write(
      toJson({
        ok: !failed && !io.signal.aborted,
        scale: options.scale,
        clients: options.clients,
        scenarios: rows,
        cascade: observation
          ? {
              rootCause: observation.alterPid,
              waitsFor: observation.holderPid,
              report: observation.report,
              safeDdlAttempts: observation.attempts,
            }
          : null,
      }),
    );
  } else {
    io.stdout.write(renderDemo(rows, observation, io));
  }
  if (io.signal.aborted) return EXIT.interrupted;
  return failed ? EXIT.findings : EXIT.ok;
}

function describe(scenario: Scenario) {
  return { id: scenario.id, title: scenario.title, pattern: scenario.pattern };
}

function isResult(value: unknown): value is ScenarioResult {
  const r = value as Partial<ScenarioResult> | null;
  const side = (s: unknown) =>
    typeof s === 'object' &&
    s !== null &&
    ['operations', 'anomalies', 'opsPerSec'].every(
      (k) => typeof (s as Record<string, unknown>)[k] === 'number',
    );
  return (
    typeof r === 'object' &&
    r !== null &&
    side(r.naive) &&
    side(r.pattern) &&
    typeof r.anomalyLabel === 'string'
  );
}

function renderDemo(
  rows: readonly DemoRow[],
  observation: CascadeObservation | undefined,
  io: CliIo,
): string {
  const style = createStyle(io.stdout, io.env);
  const out: string[] = [];
  if (observation) {
    out.push(
      style('bold', '── Live: the lock-queue cascade behind a waiting ALTER TABLE ──'),
      `A long transaction (pid ${observation.holderPid}) reads "orders"; ALTER TABLE (pid ${observation.alterPid}) waits for ACCESS EXCLUSIVE; readers queue behind it.`,
      'What `pg-txkit doctor` saw at that moment:',
      '',
      renderLockReport(observation.report, style)
        .split('\n')
        .map((l) => `  ${l}`)
        .join('\n'),
      '',
      'Resolution: the same ALTER TABLE with safeDdl (short lock_timeout, jittered retries):',
      ...observation.attempts.map((a) => `  ${attemptLine(a)}`),
      '',
    );
  }
  const n = (x: number) => String(x);
  // Each cell says its unit: a scenario counts its own kind of operation (transfers, readers …).
  const rate = (x: number, unit: string | undefined) =>
    `${x >= 100 ? x.toFixed(0) : x.toFixed(1)} ${unit ?? 'ops/s'}`;
  out.push(
    style('bold', '── Summary ──'),
    renderTable(
      [
        { header: 'scenario' },
        { header: 'pattern' },
        { header: 'naive anomalies', align: 'right' },
        { header: 'pattern anomalies', align: 'right' },
        { header: 'naive throughput', align: 'right' },
        { header: 'pattern throughput', align: 'right' },
        { header: 'anomaly' },
      ],
      rows.map((r) =>
        r.result
          ? [
              r.id,
              r.pattern,
              n(r.result.naive.anomalies),
              n(r.result.pattern.anomalies),
              rate(r.result.naive.opsPerSec, r.result.unit),
              rate(r.result.pattern.opsPerSec, r.result.unit),
              r.result.anomalyLabel,
            ]
          : [r.id, r.pattern, '-', '-', '-', '-', `FAILED: ${r.error ?? ''}`],
      ),
    ),
  );
  out.push(
    style(
      'dim',
      "Throughput counts every operation, the wrong ones too: a naive row's higher number is work done wrong (its anomalies), not a faster pattern.",
    ),
  );
  const notes = rows.filter((r) => r.result?.note).map((r) => `  ${r.id}: ${r.result?.note}`);
  if (notes.length > 0) out.push('', 'Notes:', ...notes);
  const bad = rows.filter((r) => r.error !== undefined || (r.result?.pattern.anomalies ?? 0) > 0);
  const quiet = rows.filter((r) => r.result && r.result.naive.anomalies === 0);
  if (quiet.length > 0) {
    out.push(
      '',
      `Naive race not observed at this scale for: ${quiet.map((r) => r.id).join(', ')} (try a larger --scale).`,
    );
  }
  out.push(
    '',
    bad.length === 0
      ? style('green', `OK: ${rows.length} scenario(s), 0 anomalies with the patterns.`)
      : style('red', `FAILED: ${bad.map((r) => r.id).join(', ')}`),
    '',
  );
  return out.join('\n');
}

function attemptLine(a: DdlAttempt): string {
  const what = a.outcome === 'ok' ? 'succeeded' : `gave up (${a.outcome}${a.code ? ` ${a.code}` : ''})`;
  return `attempt ${a.attempt}: ${what} after ${a.durationMs} ms${a.delayMs > 0 ? `, next in ${a.delayMs} ms` : ''}`;
}
