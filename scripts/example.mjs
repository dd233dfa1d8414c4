// Runs one example by name: `npm run example -- seat-booking`.
// `.mjs` examples import the built package (dist/); `.ts` examples are compiled with the benchmarks
// into dist-bench/ (npm run build:bench). Both start an embedded PostgreSQL of their own.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';

const name = process.argv[2];
const available = readdirSync('examples')
  .filter((f) => /\.(mjs|ts)$/.test(f))
  .map((f) => f.replace(/\.(mjs|ts)$/, ''))
  .sort();
if (!name || !available.includes(name)) {
  console.error(`usage: npm run example -- <name>\navailable: ${available.join(', ')}`);
  process.exit(2);
}
const run = (cmd, args) => {
  const r = spawnSync(cmd, args, { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
if (existsSync(`examples/${name}.mjs`)) {
  if (!existsSync('dist/index.js')) run('npm', ['run', 'build']);
  run(process.execPath, [`examples/${name}.mjs`]);
} else {
  run('npm', ['run', 'build:bench', '--silent']);
  run(process.execPath, [`dist-bench/examples/${name}.js`]);
}
