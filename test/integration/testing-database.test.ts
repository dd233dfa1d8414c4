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

  it("builds a template with the caller's migrations once, and clones it migrated", async () => {
    const template = `mig_${Date.now().toString(36)}`;
    let migrations = 0;
    const migrate = async (templateUrl: string) => {
      migrations++;
      const c = new pg.Client(templateUrl);
      await c.connect();
      try {
        await c.query('CREATE TABLE app_users (id int PRIMARY KEY, email text UNIQUE)');
      } finally {
        await c.end();
      }
    };
    const [a, b] = await Promise.all([
      createTestDatabase(inject('pgUrl'), { template, migrate }),
      createTestDatabase(inject('pgUrl'), { template, migrate }),
    ]);
    try {
      expect(migrations).toBe(1);
      for (const db of [a, b]) {
        const c = new pg.Client(db.url);
        await c.connect();
        const t = await c.query("SELECT to_regclass('app_users') IS NOT NULL AS present");
        await c.end();
        expect(t.rows[0].present).toBe(true);
      }
    } finally {
      await a.drop();
      await b.drop();
      const admin = new pg.Client(inject('pgUrl'));
      await admin.connect();
      await admin
        .query(`ALTER DATABASE ${admin.escapeIdentifier(template)} IS_TEMPLATE false`)
        .catch(() => {});
      await admin.query(`DROP DATABASE IF EXISTS ${admin.escapeIdentifier(template)}`);
      await admin.end();
    }
  });
});
