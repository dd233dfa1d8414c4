import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { CliIo, OutputStream } from '../../src/cli/cli-io.js';
import { main } from '../../src/cli/main.js';

/** Runs `main(argv)` (or `options.entry`) in-process with captured stdout/stderr. */
export async function runMain(
  argv: string[],
  options: {
    env?: Record<string, string>;
    signal?: AbortSignal;
    onStdout?: (chunk: string) => void;
    /** Another command-line entry with main's shape (the benchmark runner's). */
    entry?: (argv: string[], io: CliIo) => Promise<number>;
  } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out: OutputStream = {
    write: (s: string) => {
      stdout += s;
      options.onStdout?.(s);
      return true;
    },
    isTTY: false,
  };
  const err: OutputStream = {
    write: (s: string) => {
      stderr += s;
      return true;
    },
    isTTY: false,
  };
  const io: CliIo = {
    stdout: out,
    stderr: err,
    env: options.env ?? {},
    signal: options.signal ?? new AbortController().signal,
  };
  const code = await (options.entry ?? main)(argv, io);
  return { code, stdout, stderr };
}

/** The repository root and the real launcher. */
export const BIN = fileURLToPath(new URL('../../bin/pg-txkit.js', import.meta.url));

/**
 * Runs `node bin/pg-txkit.js …` as a child process (bounded: killed after `timeoutMs`). `onStderr` may
 * signal the child (Ctrl-C tests).
 */
export function runBin(
  argv: string[],
  options: {
    timeoutMs?: number;
    env?: Record<string, string>;
    onStderr?: (text: string, pid: number) => void;
    /** Called with the whole stdout so far whenever more arrives (a long-running command's lines). */
    onStdout?: (text: string, pid: number) => void;
    /** Start it in a process group of its own, as a terminal does: `process.kill(-pid, …)` then reaches the group. */
    group?: boolean;
  } = {},
): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: '1', ...options.env };
    delete env.DATABASE_URL;
    const child = spawn(process.execPath, [BIN, ...argv], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: options.group === true,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      if (child.pid !== undefined) options.onStdout?.(stdout, child.pid);
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (child.pid !== undefined) options.onStderr?.(stderr, child.pid);
    });
    const timer = setTimeout(() => {
      if (options.group === true && child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      else child.kill('SIGKILL');
    }, options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}
