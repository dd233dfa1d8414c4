// Copies the .sql files that modules own next to their compiled output in dist/.
import { cp, readdir } from 'node:fs/promises';
import { join, relative } from 'node:path';

async function* walk(dir) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else if (entry.name.endsWith('.sql')) yield path;
  }
}
for await (const file of walk('src')) {
  await cp(file, join('dist', relative('src', file)));
}
