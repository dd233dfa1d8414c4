import pg from 'pg';
import { afterAll, inject } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../src/testing/test-database.js';

/** The run's server admin URL (from the global setup). */
export function serverUrl(): string {
  return inject('pgUrl');
}

/**
 * A fresh database for this test file plus a pool on it; both are dropped after the file.
 * Call at the top level of a test file: `const db = await useTestDatabase();`
 */
export async function useTestDatabase(poolOptions: pg.PoolConfig = {}): Promise<{
  db: TestDatabase;
  url: string;
  pool: pg.Pool;
}> {
  const db = await createTestDatabase(serverUrl());
  const pool = new pg.Pool({ connectionString: db.url, max: 20, ...poolOptions });
  pool.on('error', () => {});
  afterAll(async () => {
    await pool.end();
    await db.drop();
  });
  return { db, url: db.url, pool };
}
