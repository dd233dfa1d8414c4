import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** A module that could not be loaded, and why. */
export interface LoadProblem {
  readonly file: string;
  /** 'import' when the module failed to load, 'export' when it lacks the expected export. */
  readonly kind: 'import' | 'export';
  readonly reason: string;
}

/**
 * Imports every module of a folder (`.js`/`.mjs`, or `.ts` when running from sources under a TS-aware
 * runner; never `.d.ts`), sorted by file name, and picks each module's export with `pick`. A missing
 * folder yields nothing; a module that fails to import or lacks the export is reported in `problems`.
 *
 * @example
 * const { items } = await loadModules(dir, (m) => (Array.isArray(m.scenarios) ? m.scenarios : undefined));
 */
export async function loadModules<T>(
  dir: string,
  pick: (mod: Record<string, unknown>) => T | undefined,
  options: { readonly typescript?: boolean } = {},
): Promise<{ items: { file: string; value: T }[]; problems: LoadProblem[] }> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return { items: [], problems: [] };
  }
  const wanted = names
    .filter(
      (n) => /\.(m?js)$/.test(n) || (options.typescript === true && /\.ts$/.test(n) && !/\.d\.ts$/.test(n)),
    )
    .sort();
  const items: { file: string; value: T }[] = [];
  const problems: LoadProblem[] = [];
  for (const name of wanted) {
    const file = join(dir, name);
    try {
      const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
      const value = pick(mod);
      if (value === undefined)
        problems.push({ file, kind: 'export', reason: 'it does not have the expected export' });
      else items.push({ file, value });
    } catch (error) {
      problems.push({ file, kind: 'import', reason: error instanceof Error ? error.message : String(error) });
    }
  }
  return { items, problems };
}
