import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runIsolationSpec } from '../../src/testing/run-isolation-spec.js';
import { useTestDatabase } from '../helpers.js';

const { url } = await useTestDatabase();

const read = (path: string): string => readFileSync(new URL(`../isolation/${path}`, import.meta.url), 'utf8');

async function output(spec: string): Promise<string> {
  const run = await runIsolationSpec(url, read(spec));
  if (run.isErr()) throw run.error;
  return run.value.output;
}

describe("runIsolationSpec: PostgreSQL's own isolation tests give PostgreSQL's expected output", () => {
  for (const name of [
    'nowait',
    'deadlock-simple',
    'simple-write-skew',
    'insert-conflict-do-nothing-2',
    'eval-plan-qual-partition-prune',
    'skip-locked',
  ]) {
    it(name, async () => {
      expect(await output(`postgresql/${name}.spec`)).toBe(read(`postgresql/${name}.out`));
    });
  }
});
