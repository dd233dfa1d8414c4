import net from 'node:net';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod/v4';
import { type Logger, Queue, TxManager } from '../../src/index.js';
import { eventually } from '../fixtures/queue-helpers.js';

/** A port nobody listens on: bound, then closed again. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return address.port;
}

interface Line {
  readonly level: string;
  readonly obj: Record<string, unknown>;
  readonly msg: string | undefined;
}

/** A pino-compatible logger that records its lines. */
function recordingLogger(): { lines: Line[]; logger: Logger } {
  const lines: Line[] = [];
  const at =
    (level: string) =>
    (obj: object, msg?: string): void => {
      lines.push({ level, obj: obj as Record<string, unknown>, msg });
    };
  return { lines, logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') } };
}

describe('a worker pointed at an unreachable database', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('logs its connection errors to the given logger instead of swallowing them', async () => {
    const port = await closedPort();
    // The README's setup: a plain pool, no pool.on('error').
    const pool = new pg.Pool({ host: '127.0.0.1', port, user: 'nobody', database: 'none' });
    const { lines, logger } = recordingLogger();
    const tm = new TxManager(pool);
    const queue = new Queue({ pool, txManager: tm, tasks: { email: z.object({ to: z.string() }) }, logger });
    const worker = queue.work({ email: async () => {} }, { pollInterval: 20 });
    try {
      await eventually(() => lines.some((l) => l.level === 'error' && l.obj.phase === 'claim'));
      const first = lines.find((l) => l.level === 'error' && l.obj.phase === 'claim');
      expect(first?.obj.phase).toBe('claim');
      expect(String(first?.msg)).toMatch(/claim/);
      expect(first?.obj.err).toBeDefined();
    } finally {
      await worker.stop();
      await pool.end();
    }
  });

  it('without a logger writes to console.error, rate-limited, never silently', async () => {
    const port = await closedPort();
    const pool = new pg.Pool({ host: '127.0.0.1', port, user: 'nobody', database: 'none' });
    const written: unknown[][] = [];
    vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
      written.push(args);
    });
    const tm = new TxManager(pool);
    const queue = new Queue({ pool, txManager: tm, tasks: { email: z.object({ to: z.string() }) } });
    const worker = queue.work({ email: async () => {} }, { pollInterval: 20 });
    try {
      await eventually(() => worker.counters.errors >= 5);
      expect(written.length).toBeGreaterThanOrEqual(1);
      // Rate-limited: five failed claims, one line (the next one a minute later at the earliest).
      expect(written.length).toBeLessThan(worker.counters.errors);
      const claimLines = written.filter((w) => /pg-txkit queue worker: claim failed/.test(String(w[0])));
      expect(claimLines).toHaveLength(1);
      expect(String(claimLines[0]?.[0])).toMatch(/ECONNREFUSED/);
    } finally {
      await worker.stop();
      await pool.end();
    }
  });
});
