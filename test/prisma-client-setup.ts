import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Generates the query-builder suite's Prisma client when it is missing or stale (the script skips the
 * work when the schema and the prisma version are those it was generated from), so a test file can be
 * run directly on a fresh clone. `npm run typecheck` runs the same script first.
 */
export default function setup(): void {
  const script = fileURLToPath(new URL('../scripts/prisma-generate.mjs', import.meta.url));
  const result = spawnSync(process.execPath, [script], { stdio: 'inherit' });
  if (result.status !== 0) throw new Error(`prisma-generate.mjs failed (exit ${String(result.status)})`);
}
