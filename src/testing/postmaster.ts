import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';

// The postmaster's lifecycle, shared by the primary (start-postgres) and its standby (start-standby):
// a free port, start in a process group of its own, smart-then-fast stop, the signal safety net.

/** A free TCP port on 127.0.0.1 (the OS picks it; the socket is closed before the port is used). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** How long stop() lets sessions end on their own (smart shutdown) before it terminates them. */
export const STOP_GRACE_MS = 5000;

/** Name of the signal listeners of {@link guardSignals} (how they recognise each other). */
const SIGNAL_LISTENER = 'pgTxkitStopOnSignal';

/**
 * Starts a postmaster in a process group of its own (`detached`), so that a terminal's Ctrl-C (sent to
 * the whole foreground group) reaches only the program: the server is not shut down under the
 * program's feet (which terminated its pooled connections with 57P01 before its handler ran), and the
 * program decides when to stop it. Resolves once it accepts connections.
 */
/** The postmaster's readiness line (a hot standby accepts read-only connections; PostgreSQL 14 spells it without the hyphen). */
const READY = /database system is ready to accept (read[- ]only )?connections/;

export function startPostmaster(
  binary: string,
  args: readonly string[],
  ids: { uid: number; gid: number } | undefined,
  log: (line: string) => void,
): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, {
      ...ids,
      detached: true,
      stdio: ['ignore', 'ignore', 'pipe'],
      // Untranslated server messages: the readiness line below is matched in English.
      env: { ...process.env, LC_MESSAGES: 'C' },
    });
    let output = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      log(text);
      if (output.length < 10_000) output += text;
      if (READY.test(text)) resolve(child);
    });
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      reject(new Error(`postgres exited during start-up (code ${code}, signal ${signal}): ${output.trim()}`)),
    );
  });
}

/**
 * Stops a postmaster and resolves once it has exited — at once when it already had. With `graceMs`,
 * a smart shutdown first (SIGTERM: no new sessions, the open ones end on their own — a pool just ended
 * is still closing its sockets, and a fast shutdown would send them 57P01), then a fast one (SIGINT:
 * sessions still open after the grace period are terminated).
 */
export async function stopPostmaster(child: ChildProcess | undefined, graceMs: number): Promise<void> {
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<boolean>((resolve) => child.once('exit', () => resolve(true)));
  if (graceMs > 0) {
    child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const done = await Promise.race([
      exited,
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), graceMs);
      }),
    ]);
    clearTimeout(timer);
    if (done) return;
  }
  child.kill('SIGINT');
  await exited;
}

/**
 * The safety net for a program that handles no signal itself: on SIGINT/SIGTERM/SIGHUP the server is
 * stopped and its folder removed, then the signal is raised again with its default action (the
 * process ends as it would have). When the program has a listener of its own for that signal, nothing
 * is done: its handler owns the shutdown (and calls `stop()`). At 'exit' a still-running server is sent
 * a fast shutdown, so it never outlives the process. Returns the function that removes the listeners.
 */
export function guardSignals(stop: () => Promise<void>, child: () => ChildProcess | undefined): () => void {
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  // Named functions: the listeners of every server started here recognise each other by this name.
  function pgTxkitStopOnSignal(signal: NodeJS.Signals): void {
    if (process.listeners(signal).some((l) => l.name !== SIGNAL_LISTENER)) return;
    void stop().finally(() => {
      if (!process.listeners(signal).some((l) => l.name === SIGNAL_LISTENER))
        process.kill(process.pid, signal);
    });
  }
  function pgTxkitStopOnExit(): void {
    const c = child();
    if (c !== undefined && c.exitCode === null && c.signalCode === null) c.kill('SIGINT');
  }
  const onSignal = pgTxkitStopOnSignal;
  const onExit = pgTxkitStopOnExit;
  for (const signal of signals) process.on(signal, onSignal);
  process.on('exit', onExit);
  return () => {
    for (const signal of signals) process.off(signal, onSignal);
    process.off('exit', onExit);
  };
}
