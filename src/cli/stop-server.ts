import type { StartedPostgres } from '../testing/start-postgres.js';

/**
 * Stops a server the CLI started, bounded in time, so the CLI's own clean-up always finishes.
 *
 * @example
 * await stopServer(server);
 */
export async function stopServer(server: StartedPostgres, timeoutMs = 10_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    server.stop().catch(() => {}),
    // A referenced timer: an unreferenced one let the process end (exit 0, the folder left behind)
    // while a stop() waited on a server that had already exited.
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
}
