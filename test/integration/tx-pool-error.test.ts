import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { PoolErrorEvent } from '../../src/tx/hooks.js';
import { TxManager } from '../../src/tx/tx-manager.js';
import { useTestDatabase } from '../helpers.js';

const { pool, url } = await useTestDatabase();

describe("the README's setup survives a terminated idle connection", () => {
  it('new pg.Pool() + new TxManager(pool), no pool.on("error"): pg_terminate_backend of the idle client does not kill the process', async () => {
    const dist = process.env.PG_TXKIT_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
    if (!existsSync(`${dist}/index.js`)) {
      throw new Error(`${dist}/index.js is missing: run \`npm run build\` first (npm test does)`);
    }
    const child = spawn(
      process.execPath,
      [fileURLToPath(new URL('../fixtures/tx-readme-setup-child.mjs', import.meta.url))],
      {
        env: { ...process.env, DATABASE_URL: url, PG_TXKIT_DIST: dist },
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const lines = createInterface({ input: child.stdout });
    const messages: Record<string, unknown>[] = [];
    for await (const line of lines) {
      const message = JSON.parse(line) as Record<string, unknown>;
      messages.push(message);
      if (typeof message.pid === 'number') {
        // From outside, as a restart, a failover or a serverless proxy would.
        await pool.query('SELECT pg_terminate_backend($1)', [message.pid]);
        child.stdin.write('terminated\n');
      }
      if ('alive' in message) break;
    }
    child.stdin.end();
    const code = await exited;
    expect({ code, messages: messages.map((m) => Object.keys(m)[0]) }).toEqual({
      code: 0,
      messages: ['pid', 'alive'],
    });
    expect(messages[1]).toEqual({ alive: true });
    // Not silent: without an onError hook the library writes one line saying what happened.
    expect(stderr).toMatch(/pg-txkit: an idle pooled connection failed/);
  });
});

describe('onPoolError', () => {
  it("reports an idle client's failure to the hook (and nothing to the console)", async () => {
    const userPool = new pg.Pool({ connectionString: url, max: 2 });
    const events: PoolErrorEvent[] = [];
    const tm = new TxManager(userPool, { hooks: { onPoolError: (event) => events.push(event) } });
    const pid = await tm.doOrThrow(
      async (tx) => (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid,
    );
    const reported = new Promise<void>((resolve) => userPool.once('error', () => resolve()));
    await pool.query('SELECT pg_terminate_backend($1)', [pid]);
    await reported;
    expect(events.map((e) => (e.error as { code?: string }).code)).toEqual(['57P01']);
    expect(
      await tm.doOrThrow(async (tx) => (await tx.query<{ n: number }>('SELECT 1 AS n')).rows[0]?.n),
    ).toBe(1);
    await userPool.end();
  });
});
