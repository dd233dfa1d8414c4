// Types of mixed-workload.mjs (plain JavaScript so that scripts/soak.mjs can run it with node).

/** Sizes and knobs of one run. */
export interface MixedWorkloadOptions {
  readonly workers: number;
  readonly lanes: number;
  readonly queueConcurrency: number;
  readonly poolMax: number;
  readonly transactions: number;
  readonly durationMs: number;
  readonly jobs: number;
  readonly backlog: number;
  readonly accounts: number;
  readonly rooms: number;
  readonly bookingHours: number;
  readonly paymentKeys: number;
  readonly singleRunKeys: number;
  readonly faultMinMs: number;
  readonly faultMaxMs: number;
  readonly restarts: number;
  readonly restartEveryMs: number;
  readonly stallMaxMs: number;
  readonly spareSlot0: boolean;
  readonly drainTimeoutMs: number;
  readonly reportEveryMs: number;
  readonly sampleEveryMs: number;
  readonly seed: number;
  /** Record the history of transfers, payments and singleRun reports and check it (checkHistory). */
  readonly history: boolean;
  /** The naive control: transfers read with a plain SELECT at READ COMMITTED, no row lock, no retry. */
  readonly naive: boolean;
}

/** The recorded history and what checkHistory (serializable, with session order) found in it. */
export interface MixedWorkloadHistory {
  readonly transactions: number;
  readonly outcomes: { readonly commit: number; readonly abort: number; readonly unknown: number };
  readonly valid: boolean;
  readonly anomalyTypes: readonly string[];
  readonly forbidden: readonly string[];
  readonly dependencies: number;
  readonly checkMs: number;
  /** The first anomalies' explanations. */
  readonly explanations: readonly string[];
}

/** One RSS sample of a process: `slot` is the worker slot (a respawn keeps its slot) or 'harness'. */
export interface RssSample {
  readonly t: number;
  readonly slot: number | 'harness';
  readonly pid: number;
  readonly rss: number;
  readonly heapUsed?: number;
}

/** What a run did and found. */
export interface MixedWorkloadResult {
  readonly seed: number;
  readonly options: MixedWorkloadOptions;
  readonly workloadMs: number;
  readonly totalMs: number;
  readonly operations: number;
  readonly opsByKind: Readonly<Record<string, number>>;
  readonly outcomes: Readonly<Record<string, number>>;
  readonly jobs: {
    readonly enqueued: number;
    readonly done: number;
    readonly dead: number;
    readonly outcomes: Readonly<Record<string, number>>;
  };
  readonly transfersCommitted: number;
  readonly faults: Readonly<Record<string, number>>;
  readonly retries: Readonly<Record<string, number>>;
  readonly unhandled: number;
  /** Absent when the run recorded no history (`history: false`). */
  readonly history: MixedWorkloadHistory | undefined;
  readonly rssSamples: readonly RssSample[];
  /** Everything a check found; empty when the run is clean. */
  readonly anomalies: readonly string[];
  /** The one-line summary of the run. */
  readonly summary: string;
}

export declare const DEFAULTS: Readonly<MixedWorkloadOptions>;

/** `RELIABILITY_*` environment variables over `base`. */
export declare function optionsFromEnv(
  base?: Partial<MixedWorkloadOptions>,
  env?: Readonly<Record<string, string | undefined>>,
): Partial<MixedWorkloadOptions>;

/** Runs the mixed workload under faults against `postgres` (its own server: it is restarted). */
export declare function runMixedWorkload(
  input: {
    readonly postgres: { readonly url: string; restart(): Promise<void> };
    readonly log?: (line: string) => void;
  } & Partial<MixedWorkloadOptions>,
): Promise<MixedWorkloadResult>;
