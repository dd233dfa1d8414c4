// Copies the .sql files that modules own next to their compiled output (dist/ by default, or the
// folder given as the first argument), since modules read them at run time.
import { cp, readdir } from 'node:fs/promises';
import { join, relative } from 'node:path';

const target = process.argv[2] ?? 'dist';

async function* walk(dir) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else if (entry.name.endsWith('.sql')) yield path;
  }
}
for await (const file of walk('src')) {
  await cp(file, join(target, relative('src', file)));
}
