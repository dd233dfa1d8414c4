/**
 * The contract between `pg-txkit demo` and the scenario modules in `src/cli/scenarios/`.
 *
 * Each file in that folder exports `scenarios: Scenario[]`; the demo loads every file it finds there,
 * gives each scenario a fresh database, and prints one summary row per scenario.
 */

/** What one side (naive or pattern) of a scenario measured. */
export interface SideResult {
  /** Operations attempted. */
  readonly operations: number;
  /** Anomalies found by the scenario's checker (lost updates, oversold units, duplicates …). */
  readonly anomalies: number;
  /** Operations per second over the side's wall time (in the scenario's {@link ScenarioResult.unit}). */
  readonly opsPerSec: number;
}

/** What a scenario reports. */
export interface ScenarioResult {
  /** The naive version (read in app, check, write; or the bug from a seed). */
  readonly naive: SideResult;
  /** The same workload with the pg-txkit pattern. Its anomalies must be 0. */
  readonly pattern: SideResult;
  /** What an anomaly means here, e.g. 'oversold seats' (shown in the table). */
  readonly anomalyLabel: string;
  /** What one operation is, for the throughput columns: `'ops/s'` when absent, e.g. `'readers/s'`. */
  readonly unit?: string;
  /** Optional extra line for the report. */
  readonly note?: string;
}

/** Context the demo gives a scenario. */
export interface ScenarioContext {
  /** Connection string of a fresh database for this scenario alone. */
  readonly url: string;
  /** How many concurrent clients to use (the demo's --clients, default 16). */
  readonly clients: number;
  /** Scale factor: 1 for the default run; tests use a small value to stay fast. */
  readonly scale: number;
  /** Reports progress (done out of total units of work). */
  onProgress(done: number, total: number): void;
  /** Stop early when aborted (Ctrl-C). */
  readonly signal: AbortSignal;
}

/** One demo scenario: the same workload run naively and with the pattern. */
export interface Scenario {
  /** Short kebab-case id, e.g. 'seat-booking'. */
  readonly id: string;
  /** One-line title for the table. */
  readonly title: string;
  /** The pattern used, e.g. 'updateWhere'. */
  readonly pattern: string;
  /** Runs both sides and checks the invariant. Must close every connection it opened. */
  run(context: ScenarioContext): Promise<ScenarioResult>;
}
