/** Which provider started (or found) the server. */
export type PostgresProvider = 'url' | 'testcontainers' | 'embedded';

/** No provider could start a server. `attempts` says which ones were tried and why each failed. */
export class PostgresStartError extends Error {
  /** The class name, for stack traces and logs. */
  override readonly name = 'PostgresStartError';
  /** Each provider tried, in order, and why it failed. */
  readonly attempts: readonly { provider: PostgresProvider; reason: string }[];
  constructor(attempts: readonly { provider: PostgresProvider; reason: string }[], options?: ErrorOptions) {
    super(
      `could not start PostgreSQL: ${attempts.map((a) => `${a.provider}: ${a.reason}`).join('; ')}`,
      options,
    );
    this.attempts = attempts;
  }
}
