import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a build script in JavaScript, without type declarations.
import { generate } from '../../scripts/queue-migrations.mjs';
import { QUEUE_MIGRATIONS } from '../../src/queue/schema/queue-migrations.generated.js';

const dir = new URL('../../src/queue/schema/migrations/', import.meta.url);

describe('the frozen migrations and the module that bundles them', () => {
  it('the committed module is what the generator makes of the .sql files (run the generator after adding one)', () => {
    const committed = readFileSync(
      new URL('../../src/queue/schema/queue-migrations.generated.ts', import.meta.url),
      'utf8',
    );
    expect(committed).toBe(generate());
  });

  it('holds every .sql file, in version order, with its text and sha-256', () => {
    const files = readdirSync(dir).filter((f) => f.endsWith('.sql'));
    expect(QUEUE_MIGRATIONS.map((m) => m.name)).toEqual(files.sort());
    QUEUE_MIGRATIONS.forEach((m, i) => {
      const text = readFileSync(new URL(m.name, dir), 'utf8');
      expect(m.version).toBe(i + 1);
      expect(m.sql).toBe(text);
      expect(m.checksum).toBe(createHash('sha256').update(text).digest('hex'));
    });
  });

  it('each file says it is frozen', () => {
    for (const m of QUEUE_MIGRATIONS) expect(m.sql).toMatch(/FROZEN: never edit this file/);
  });

  it('0001 is the schema of 0.2.0, pinned by its checksum (an edit of a released migration fails here)', () => {
    expect(QUEUE_MIGRATIONS[0]?.checksum).toBe(
      '3d1e431caaea0ef25831f5b23b8817b896b83c47196c514813fef843cbd0ed89',
    );
  });
});
