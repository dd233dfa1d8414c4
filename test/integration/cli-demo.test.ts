import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { serverUrl } from '../helpers.js';
import { runBin, runMain } from './cli-support.js';

// Demo runs in this file are sequential (one file): the leftovers check below sees only its own run.
const admin = new pg.Pool({ connectionString: serverUrl(), max: 2 });
admin.on('error', () => {});
afterAll(() => admin.end());

interface DemoJson {
  ok: boolean;
  scenarios: {
    id: string;
    error?: string;
    result?: { naive: { anomalies: number }; pattern: { anomalies: number }; anomalyLabel: string };
  }[];
  cascade: {
    rootCause: number;
    waitsFor: number;
    report: { cascades: { rootCause: { pid: number } }[] };
  } | null;
}

/** Bounded wait for the demo's sessions and databases to be gone (backends exit asynchronously). */
async function leftovers(): Promise<{ sessions: number; databases: number }> {
  let last = { sessions: -1, databases: -1 };
  for (let i = 0; i < 500; i++) {
    // pg_stat_activity / pg_database reads: no lock beyond AccessShare on the catalog.
    const { rows } = await admin.query<{ sessions: number; databases: number }>(
      `SELECT (SELECT count(*)::int FROM pg_stat_activity WHERE application_name LIKE 'demo:%') AS sessions,
              (SELECT count(*)::int FROM pg_database WHERE datname LIKE 'demo\\_%') AS databases`,
    );
    last = rows[0] ?? last;
    if (last.sessions === 0 && last.databases === 0) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  return last;
}

/**
 * Resolves once the demo's embedded server (found through its postmaster.pid under `tmp`) runs a query
 * of a scenario's replica pools: bounded polling from a monitor session.
 */
async function whenReplicasActive(tmp: string): Promise<void> {
  for (let i = 0; i < 3000; i++) {
    const dir = readdirSync(tmp).find((d) => d.startsWith('pg-txkit-'));
    const pidFile = dir === undefined ? '' : join(tmp, dir, 'postmaster.pid');
    const port = existsSync(pidFile) ? readFileSync(pidFile, 'utf8').split('\n')[3] : undefined;
    if (port) {
      const monitor = new pg.Client({
        connectionString: `postgres://postgres:pg-txkit@127.0.0.1:${port}/postgres`,
      });
      monitor.on('error', () => {}); // the monitor's own connection ends with the server
      try {
        await monitor.connect();
        for (let j = 0; j < 3000; j++) {
          // pg_stat_activity read: no lock.
          const { rows } = await monitor.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE '%-replica-%' AND state = 'active'",
          );
          if ((rows[0]?.n ?? 0) > 0) return;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      } catch {
        // not accepting connections yet: try again
      } finally {
        await monitor.end().catch(() => {});
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('the demo never ran a scenario query');
}

describe('pg-txkit demo', () => {
  /** The cascade scenario alone, small: a few hundred ms. */
  const QUICK_CASCADE = [
    'demo',
    '--url',
    serverUrl(),
    '--scale',
    '0.05',
    '--clients',
    '3',
    '--only',
    'lock-queue-cascade',
  ];

  it('stages the lock-queue cascade in-process: doctor names the ALTER as root cause, safeDdl resolves it', async () => {
    const r = await runMain([...QUICK_CASCADE, '--json']);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as DemoJson;
    expect(out.ok).toBe(true);
    expect(out.scenarios).toHaveLength(1);
    expect(out.scenarios[0]?.result?.naive.anomalies).toBe(3);
    // the rows carry what a user reads (no internal fields such as the module a scenario came from)
    expect(Object.keys(out.scenarios[0] ?? {}).sort()).toEqual(['id', 'pattern', 'result', 'title']);
    expect(out.scenarios[0]?.result).toMatchObject({ unit: 'readers/s' });
    expect(out.scenarios[0]?.result?.pattern.anomalies).toBe(0);
    expect(out.cascade?.report.cascades[0]?.rootCause.pid).toBe(out.cascade?.rootCause);
    expect(await leftovers()).toEqual({ sessions: 0, databases: 0 });
  });

  it('node bin/pg-txkit.js demo --scale 0.05: every scenario, 0 anomalies with the pattern, > 0 naive', async () => {
    const r = await runBin(['demo', '--scale', '0.05', '--url', serverUrl(), '--json'], {
      timeoutMs: 240_000,
    });
    expect(r.stderr).not.toMatch(/warning|FAILED|failed:/);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as DemoJson;
    expect(out.scenarios.length).toBeGreaterThanOrEqual(1);
    for (const s of out.scenarios) {
      expect(s.error, s.id).toBeUndefined();
      expect(s.result?.pattern.anomalies, `${s.id} pattern`).toBe(0);
      expect(s.result?.naive.anomalies, `${s.id} naive`).toBeGreaterThan(0);
    }
    expect(await leftovers()).toEqual({ sessions: 0, databases: 0 });
  }, 300_000);

  it('the text summary prints one row per scenario and the doctor tree', async () => {
    const r = await runMain(QUICK_CASCADE);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Lock-queue cascades (root cause)');
    expect(r.stdout).toContain('attempt 1: gave up (LockNotAvailable 55P03)');
    expect(r.stdout).toMatch(/lock-queue-cascade\s+safeDdl\s+3\s+0\s+/);
    // one unit per cell (this scenario counts readers), and the legend under the table
    expect(r.stdout).toMatch(/naive throughput\s+pattern throughput/);
    expect(r.stdout).toMatch(/lock-queue-cascade\s+safeDdl\s+3\s+0\s+[\d.]+ readers\/s\s+[\d.]+ readers\/s/);
    expect(r.stdout).not.toContain('ops/s');
    expect(r.stdout).toContain("a naive row's higher number is work done wrong");
    expect(r.stderr).toContain('lock-queue-cascade: ok');
  });

  it('Ctrl-C stops cleanly: exit 130, connections closed, its database dropped', async () => {
    let sent = false;
    const r = await runBin(['demo', '--url', serverUrl(), '--only', 'lock-queue-cascade', '--scale', '1'], {
      timeoutMs: 60_000,
      onStderr: (text, pid) => {
        if (!sent && text.includes('lock-queue-cascade:')) {
          sent = true;
          process.kill(pid, 'SIGINT');
        }
      },
    });
    expect(sent).toBe(true);
    expect(r.code).toBe(130);
    expect(r.stderr).toContain('interrupted');
    expect(r.stderr).not.toMatch(/\s+at .*\.js:\d+/);
    expect(await leftovers()).toEqual({ sessions: 0, databases: 0 });
  });

  it('Ctrl-C during a scenario that returns normally when aborted: reported as interrupted, not as pattern anomalies', async () => {
    // daily-post checks the signal between days and returns what it did so far: its missing days are
    // not anomalies of the pattern.
    let sent = false;
    const r = await runBin(['demo', '--url', serverUrl(), '--only', 'daily-post', '--scale', '1', '--json'], {
      timeoutMs: 60_000,
      onStderr: (text, pid) => {
        if (!sent && text.includes('daily-post:')) {
          sent = true;
          process.kill(pid, 'SIGINT');
        }
      },
    });
    expect(sent).toBe(true);
    expect(r.code).toBe(130);
    expect(r.stderr).toContain('interrupted');
    expect(r.stderr).not.toContain('PATTERN ANOMALIES');
    const json = JSON.parse(r.stdout) as DemoJson;
    expect(json.ok).toBe(false);
    expect(json.scenarios.filter((s) => (s.result?.pattern.anomalies ?? 0) > 0)).toEqual([]);
    expect(await leftovers()).toEqual({ sessions: 0, databases: 0 });
  });

  it("Ctrl-C in a terminal during the first scenario, embedded server: exit 130 and the server's data folder removed", async () => {
    // A private TMPDIR shows every folder the run leaves; 1777 like /tmp (as root the server's own OS user writes there).
    const tmp = mkdtempSync(join(tmpdir(), 'pg-txkit-demo-'));
    chmodSync(tmp, 0o1777);
    try {
      let sent = false;
      let watching = false;
      const r = await runBin(['demo', '--scale', '1'], {
        timeoutMs: 120_000,
        env: { TMPDIR: tmp },
        group: true,
        onStderr: (text, pid) => {
          if (watching || !/PostgreSQL \d+/.test(text)) return;
          watching = true;
          // Once the first scenario's replicas run queries (seen from a monitor session, not a sleep),
          // the terminal sends SIGINT to the whole process group.
          void whenReplicasActive(tmp).then(() => {
            sent = true;
            process.kill(-pid, 'SIGINT');
          });
        },
      });
      expect(sent).toBe(true);
      expect(r.stderr).toContain('interrupted');
      expect(r.code).toBe(130);
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }, 180_000);
});
