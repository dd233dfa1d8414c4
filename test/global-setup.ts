import type { TestProject } from 'vitest/node';
import { startPostgres } from '../src/testing/start-postgres.js';
import { ensureTemplate } from '../src/testing/test-database.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin URL of the run's PostgreSQL server. */
    pgUrl: string;
    /** Server version string. */
    pgVersion: string;
  }
}

/** Starts one PostgreSQL server for the whole run and prepares the template database. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await startPostgres();
  await ensureTemplate(server.url);
  project.provide('pgUrl', server.url);
  project.provide('pgVersion', server.version);
  return () => server.stop();
}
