/** Which provider started (or found) the server. */
export type PostgresProvider = 'url' | 'testcontainers' | 'embedded';

/** No provider could start a server. `attempts` says which ones were tried and why each failed. */
export class PostgresStartError extends Error {
  override readonly name = 'PostgresStartError';
  readonly attempts: readonly { provider: PostgresProvider; reason: string }[];
  constructor(attempts: readonly { provider: PostgresProvider; reason: string }[], options?: ErrorOptions) {
    super(
      `could not start PostgreSQL: ${attempts.map((a) => `${a.provider}: ${a.reason}`).join('; ')}`,
      options,
    );
    this.attempts = attempts;
  }
}
