import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchMain } from '../../src/cli/bench.js';
import { serverUrl } from '../helpers.js';
import { runMain } from './cli-support.js';

describe('npm run bench (the repository benchmark runner, in-process)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'pg-txkit-bench-'));
    // A real (tiny) benchmark module: measures two statements for durationMs each.
    await writeFile(
      join(dir, 'roundtrip.bench.mjs'),
      `import pg from ${JSON.stringify(new URL('../../node_modules/pg/esm/index.mjs', import.meta.url).href)};
export async function run({ url, durationMs, onProgress }) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const measure = async (sql) => {
    let n = 0; const t0 = performance.now();
    while (performance.now() - t0 < durationMs) { await c.query(sql); n++; }
    return n / ((performance.now() - t0) / 1000);
  };
  try {
    const a = await measure('SELECT 1'); onProgress(1, 2);
    const b = await measure('SELECT count(*) FROM generate_series(1, 1000)'); onProgress(2, 2);
    return { name: 'roundtrip', baseline: 'select 1', rows: [
      { name: 'select 1', opsPerSec: a, ratio: 1 },
      { name: 'count 1000', opsPerSec: b, ratio: b / a },
    ] };
  } finally { await c.end(); }
}
`,
    );
    await writeFile(join(dir, 'helper.mjs'), 'export const notABench = 1;\n');
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('runs the modules of --dir, prints ratio tables, writes the JSON results and an SVG chart', async () => {
    const out = join(dir, 'results.json');
    const r = await runMain(['--dir', dir, '--duration', '100', '--out', out, '--url', serverUrl()], {
      entry: benchMain,
    });
    expect(r.stderr).toContain('roundtrip: done');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/roundtrip \(ratio to select 1\)/);
    expect(r.stdout).toMatch(/select 1\s+\d+\s+1\.00×/);
    const json = JSON.parse(await readFile(out, 'utf8'));
    expect(json.results[0].name).toBe('roundtrip');
    expect(json.results[0].rows[0].opsPerSec).toBeGreaterThan(0);
    const svg = await readFile(join(dir, 'results.svg'), 'utf8');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('count 1000');
  });

  it('refuses an unknown --only name or a folder without benchmarks (usage errors)', async () => {
    const unknown = await runMain(['--dir', dir, '--only', 'nope'], { entry: benchMain });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown benchmark\(s\) nope; available: roundtrip/);
    const empty = await runMain(['--dir', join(dir, 'missing')], { entry: benchMain });
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/no benchmark modules/);
  });
});

describe('npm run bench arguments', () => {
  it.each([
    [['--bogus'], 2, /Unknown option '--bogus'/],
    [['--duration', 'soon'], 2, /invalid --duration/],
    [['--url', 'mysql://x@localhost/db'], 2, /protocol must be postgres/],
    [['--only', ','], 2, /invalid --only/],
  ])('%j → exit %i with one line on stderr', async (argv, code, message) => {
    const r = await runMain(argv, { entry: benchMain });
    expect(r.code).toBe(code);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('--help prints the usage and exits 0', async () => {
    const r = await runMain(['--help'], { entry: benchMain });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage: npm run bench');
  });
});
