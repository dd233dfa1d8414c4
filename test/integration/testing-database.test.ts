import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { createTestDatabase } from '../../src/testing/test-database.js';

describe('createTestDatabase', () => {
  it('gives each caller its own database, cloned from a template with btree_gist', async () => {
    const [a, b] = await Promise.all([
      createTestDatabase(inject('pgUrl')),
      createTestDatabase(inject('pgUrl')),
    ]);
    try {
      expect(a.name).not.toBe(b.name);
      const ca = new pg.Client(a.url);
      const cb = new pg.Client(b.url);
      await ca.connect();
      await cb.connect();
      try {
        await ca.query('CREATE TABLE only_in_a (id int)');
        const inB = await cb.query("SELECT to_regclass('only_in_a') AS t");
        expect(inB.rows[0].t).toBeNull();
        const ext = await cb.query("SELECT extname FROM pg_extension WHERE extname = 'btree_gist'");
        expect(ext.rowCount).toBe(1);
      } finally {
        await ca.end();
        await cb.end();
      }
    } finally {
      await a.drop();
      await b.drop();
    }
    const admin = new pg.Client(inject('pgUrl'));
    await admin.connect();
    const left = await admin.query('SELECT 1 FROM pg_database WHERE datname = ANY($1)', [[a.name, b.name]]);
    await admin.end();
    expect(left.rowCount).toBe(0);
  });

  it('rejects a prefix that is not a plain identifier before touching the server', async () => {
    await expect(createTestDatabase(inject('pgUrl'), { prefix: 'x"; DROP' })).rejects.toThrow(TypeError);
  });
});
