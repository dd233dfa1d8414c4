import type { StartedPostgres } from '../testing/start-postgres.js';

/**
 * Stops a server the CLI started, bounded in time: after a terminal Ctrl-C the embedded postgres got
 * the same SIGINT and may already be gone, and waiting for its exit event would hang forever.
 *
 * @example
 * await stopServer(server);
 */
export async function stopServer(server: StartedPostgres, timeoutMs = 10_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    server.stop().catch(() => {}),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    }),
  ]);
  clearTimeout(timer);
}
